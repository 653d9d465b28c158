"""The Linux toolkit below the backends and the sessions: cgroups, spawning a sandbox under the
launcher, fd waits, kernel files, the warm pool and run loop that drive a sandboxed process,
and the zygote's host side. The bwrap backend, the Docker backend's forked runs and the sessions
share it; no backend reaches into another (pyproject.toml's import contracts)."""
