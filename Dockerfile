# Undoable's images, all from one Debian bookworm base so that no registry is needed:
#
#   docker build --build-arg BASE_IMAGE=python:3.11-slim --target app .    # app, Docker backend only
#   docker build --build-arg BASE_IMAGE=python:3.11-slim --target app-bwrap .  # compose: + bwrap rootfs
#   docker build --build-arg BASE_IMAGE=undoable-base:local --target redis .
#   docker build --build-arg BASE_IMAGE=undoable-base:local --target postgres .
#
# BASE_IMAGE must be Debian bookworm with python3 >= 3.11 and pip: the usual python:3.11-slim, or,
# where there is no registry (CI), the sandbox root filesystem imported with `docker import`
# (tests/fault/compose_smoke.sh does that). redis and postgres come from Debian's packages on the
# same base, so they build without a registry too.
#
# Python packages come from PyPI. Behind a TLS-intercepting proxy, put its CA bundle in
# var/docker-ca.crt (the smoke script copies the host's) and pip trusts it for this one step.
#
# Stage order matters for Docker's classic builder, which builds every stage before the target:
# the small service stages come first, then the app image; app-bwrap, which also needs the
# sandbox image, comes last so that no other target waits for it.

ARG BASE_IMAGE=python:3.11-slim
# The sandbox root filesystem as an image (`make sandbox-image`); only the app-bwrap target uses it.
ARG SANDBOX_IMAGE=undoable-sandbox:latest

FROM ${BASE_IMAGE} AS debian
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The sandbox root filesystem ships an empty /etc/shadow; package scripts (adduser, chfn) need
# the entries back. A no-op on images that have them.
RUN pwconv

# --- redis: Debian's redis-server, no persistence (runs live in PostgreSQL; the broker's queue
# is rebuilt by the reaper and by clients retrying).
FROM debian AS redis
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends redis-server >/dev/null \
    && rm -rf /var/lib/apt/lists/*
USER redis
EXPOSE 6379
CMD ["redis-server", "--bind", "0.0.0.0", "--port", "6379", "--protected-mode", "no", \
     "--save", "", "--appendonly", "no"]

# --- postgres: Debian's PostgreSQL 15. The entrypoint initialises the cluster on first start
# from POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, like the official image.
FROM debian AS postgres
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
# Executable in git; the classic builder keeps the mode.
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
USER postgres
ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:$PATH
EXPOSE 5432
CMD ["postgres-entrypoint.sh"]

# --- app: web (uvicorn), worker (celery) and management commands.
FROM debian AS app
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates bubblewrap >/dev/null \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /app
# Dependencies first, in their own layer, so a code change does not reinstall them: the runtime
# ones and the `docker` extra (this image runs the Docker backend), at the versions of the
# constraints file that `make` uses too. `var/docker-ca.cr[t]` matches nothing when there is no
# extra CA; pyproject.toml keeps the COPY valid either way.
COPY pyproject.toml requirements/constraints.txt var/docker-ca.cr[t] /tmp/build/
RUN python3 -c "import tomllib; p = tomllib.load(open('/tmp/build/pyproject.toml', 'rb'))['project']; print('\\n'.join(p['dependencies'] + p['optional-dependencies']['docker']))" \
        > /tmp/build/requirements.txt \
    && if [ -f /tmp/build/docker-ca.crt ]; then export PIP_CERT=/tmp/build/docker-ca.crt; fi \
    && python3 -m pip install -q -c /tmp/build/constraints.txt -r /tmp/build/requirements.txt \
    && rm -rf /tmp/build
COPY manage.py ./
COPY executor ./executor
COPY webapp ./webapp
COPY templates ./templates
COPY static ./static
# The app never runs as root; the Docker socket group is added at run time (compose group_add).
# var/workspaces exists in the image so that a named volume mounted there starts out ours.
RUN useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin undoable \
    && mkdir -p /app/var/workspaces && chown -R undoable /app/var
ENV UNDOABLE_VAR_DIR=/app/var EXECUTOR_BACKEND=docker
USER undoable
EXPOSE 8000
CMD ["python3", "-m", "webapp.server.serve", "-b", "0.0.0.0", "-p", "8000"]

# --- app-bwrap: the app image plus the sandbox root filesystem, for processes that run user
# code with bubblewrap inside their own container: every app service of docker-compose.yml (web's
# agent exec and sessions, the workers' runs), as the embedded default does on a host. The
# container needs user namespaces and a /proc bwrap may mount (docs/deployment.md, "Privileges").
# Every sandbox starts through the launcher (executor/launcher/), compiled here for this base.
FROM debian AS launcher
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null \
    && rm -rf /var/lib/apt/lists/*
COPY executor/launcher/undoable-launch.c /src/
# The same flags as the Makefile's `launcher` target.
RUN cc -O2 -Wall -Wextra -Werror -static -o /src/undoable-launch /src/undoable-launch.c
FROM ${SANDBOX_IMAGE} AS sandbox
FROM app AS app-bwrap
USER root
# umount, for the entrypoint.
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends mount >/dev/null \
    && rm -rf /var/lib/apt/lists/*
COPY --from=sandbox / /app/sandbox-rootfs
COPY --from=launcher /src/undoable-launch /app/executor/launcher/undoable-launch
# Executable in git; the classic builder keeps the mode.
COPY docker-entrypoint.sh /usr/local/bin/undoable-entrypoint
ENV EXECUTOR_BACKEND=bwrap EXECUTOR_ROOTFS=/app/sandbox-rootfs HOME=/app
# Starts as root only to unmask /proc, then runs the command as uid 10001 with no capabilities.
ENTRYPOINT ["undoable-entrypoint"]
