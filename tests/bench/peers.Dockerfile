# The peers' image for `make bench-peers`: Undoable's own sandbox image (imported from the local
# root filesystem, never pulled) with what llm-sandbox and epicbox expect of theirs.
FROM undoable-sandbox:latest
USER root
# llm-sandbox runs `python FILE` in /sandbox; its pool runs the venv's python.
RUN ln -sf python3 /usr/bin/python && mkdir -p /sandbox && chown 1000:1000 /sandbox
USER 1000:1000
RUN python3 -m venv --without-pip --system-site-packages /sandbox/.sandbox-venv
WORKDIR /sandbox
# llm-sandbox keeps a session's container alive on this command and ends it with `docker stop`;
# a `sleep` as PID 1 ignores SIGTERM, which would cost every session the 10 s stop timeout.
STOPSIGNAL SIGKILL
CMD ["sleep", "infinity"]
