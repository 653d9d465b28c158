"""One policy for every way of starting a sandbox (executor/policy/sandbox_policy.py): bwrap's
command line, Docker's create arguments and a zygote run render the same SandboxPolicy, and no
renderer decides a bound of its own."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from executor import Limits, RunSpec
from executor.backends.bwrap.backend import BwrapBackend
from executor.errors import InvalidLimits
from executor.linux import zygote
from executor.policy import sandbox_policy
from executor.policy.bwrap_args import SandboxFds, bwrap_argv
from executor.policy.docker_args import container_create_kwargs
from executor.policy.sandbox_policy import BASE_ENV, SANDBOX_UID, SandboxPolicy
from tests.prerequisites import ROOTFS

POLICY_DIR = Path(sandbox_policy.__file__).parent
DOCKER_DRIVER = POLICY_DIR.parent / "backends" / "docker" / "driver.py"
RENDERERS = ("bwrap_args.py", "docker_args.py", "zygote_child.py")
# Names of what the policy decides: a renderer that binds one decides it a second time.
DECIDED = {"SANDBOX_UID", "UID", "DEV_SHM_BYTES", "BASE_ENV", "HOSTNAME", "NETWORKS"}
FDS = SandboxFds(seccomp=10, job=11, status=12)
LIMITS = Limits(wall_time_s=10, tmp_quota_mib=24, workdir_quota_mib=40)
SCRATCH = """import os
for path in ("/dev/shm", "/tmp", "/workspace"):
    found = os.statvfs(path)
    print(path, found.f_blocks * found.f_frsize)
"""


def scratch_sizes(backend: BwrapBackend) -> dict[str, int]:
    result = backend.run(RunSpec(code=SCRATCH), limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    return {
        path: int(size) for path, size in (line.split() for line in result.stdout.split("\n")[:-1])
    }


def policy_sizes(policy: SandboxPolicy) -> dict[str, int]:
    return {
        "/dev/shm": policy.dev_shm_bytes,
        "/tmp": policy.tmp_bytes,
        "/workspace": policy.workdir_bytes,
    }


def zygote_sizes() -> dict[str, int]:
    backend = BwrapBackend(str(ROOTFS), zygote=True)
    try:
        backend.self_check()
        before = backend.zygote_runs
        sizes = scratch_sizes(backend)
        assert backend.zygote_runs == before + 1, "the run did not come from the zygote"
        return sizes
    finally:
        backend.close()


def test_a_zygote_run_and_a_bwrap_sandbox_get_the_policys_scratch_space():
    cold = BwrapBackend(str(ROOTFS), zygote=False)
    try:
        cold.self_check()
        assert scratch_sizes(cold) == policy_sizes(SandboxPolicy.of(LIMITS))
    finally:
        cold.close()
    assert zygote_sizes() == policy_sizes(SandboxPolicy.of(LIMITS))


def test_sabotage_a_zygote_with_a_dev_shm_of_its_own_is_caught(monkeypatch):
    class OwnShm(SandboxPolicy):
        @classmethod
        def of(cls, limits, **kwargs):  # type: ignore[override]
            policy = SandboxPolicy.of(limits, **kwargs)
            return dataclasses.replace(policy, dev_shm_bytes=2 * policy.dev_shm_bytes)

    monkeypatch.setattr(zygote, "SandboxPolicy", OwnShm)
    assert zygote_sizes() != policy_sizes(SandboxPolicy.of(LIMITS))


def test_every_renderer_gives_the_policys_uid_and_sizes(tmp_path):
    policy = SandboxPolicy.of(LIMITS)
    argv = bwrap_argv(policy, rootfs=str(ROOTFS), fds=FDS)
    assert argv[argv.index("--uid") + 1] == argv[argv.index("--gid") + 1] == str(SANDBOX_UID)
    assert argv[argv.index("/tmp") - 4] == str(policy.tmp_bytes)
    kwargs = container_create_kwargs(policy, image="undoable-sandbox", command=["true"], labels={})
    assert kwargs["user"] == f"{SANDBOX_UID}:{SANDBOX_UID}"
    assert (
        f"size={policy.tmp_bytes},uid={SANDBOX_UID},gid={SANDBOX_UID}," in kwargs["tmpfs"]["/tmp"]
    )


def refusals_of_another_network() -> list[str]:
    policy = SandboxPolicy.of(Limits(network="allowlist"))
    refused = []
    for render in (
        lambda: bwrap_argv(policy, rootfs=str(ROOTFS), fds=FDS),
        lambda: container_create_kwargs(
            policy, image="undoable-sandbox", command=["true"], labels={}
        ),
    ):
        try:
            render()
        except InvalidLimits as exc:
            refused.append(str(exc))
    return refused


def test_deny_a_network_mode_no_backend_enforces():
    assert len(refusals_of_another_network()) == 2


def test_sabotage_a_policy_that_allows_another_network_is_caught(monkeypatch):
    monkeypatch.setattr(sandbox_policy, "NETWORKS", ("none", "allowlist"))
    assert refusals_of_another_network() == []


@pytest.mark.parametrize("renderer", RENDERERS)
def test_no_renderer_decides_a_bound_of_its_own(renderer):
    tree = ast.parse((POLICY_DIR / renderer).read_text())
    bound = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert bound & DECIDED == set()


def test_the_docker_supervisors_base_environment_is_the_policys():
    """The Docker supervisor runs in its container and imports nothing of ours: its copy of the
    base environment (and the names it is built from) must stay the policy's."""
    tree = ast.parse(DOCKER_DRIVER.read_text())
    constants = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in {"WORKDIR", "OUTPUT", "BASE_ENV"}
    ]
    scope: dict[str, object] = {}
    exec(compile(ast.Module(body=constants, type_ignores=[]), str(DOCKER_DRIVER), "exec"), scope)  # noqa: S102
    assert scope["BASE_ENV"] == BASE_ENV
