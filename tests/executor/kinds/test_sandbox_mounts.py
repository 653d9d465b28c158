"""A kind's Job: its mounts reach the sandbox, its network is always none; Docker refuses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from executor.backends.docker.backend import DockerBackend
from executor.errors import BackendUnavailable
from executor.kinds.job import Job
from executor.policy.mounts import CONTROL_DIR, Mount
from executor.spec import RunSpec


def test_the_mounts_reach_a_sandbox_that_still_has_no_network(backend, limits, place: Path):
    (place / "config.txt").write_text("from the control folder")
    code = (
        "import socket\n"
        f"print(open('{CONTROL_DIR}/config.txt').read())\n"
        "print([name for _, name in socket.if_nameindex()])\n"
    )
    allowlist = dataclasses.replace(limits, network="allowlist")
    job = Job(RunSpec(code=code), allowlist, (Mount(place, CONTROL_DIR),))
    result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
    assert result.stdout == "from the control folder\n['lo']\n", result.stderr


def test_the_docker_backend_refuses_a_workspace_before_starting_anything(limits, place: Path):
    docker_backend = DockerBackend(warm_pool_size=0)
    try:
        with pytest.raises(BackendUnavailable, match="EXECUTOR_BACKEND=bwrap"):
            docker_backend.run(
                RunSpec(code="print(1)"),
                limits=limits,
                mounts=(Mount(place, "/workspace", writable=True),),
            )
    finally:
        docker_backend.close()
