"""The Docker sandbox policy as a pure function: what every container is (and is not) given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.backends.docker.wire import IMAGE_CAPS, encode_message
from executor.errors import InvalidLimits, InvalidSpec
from executor.limits import Limits
from executor.policy.docker_args import container_create_kwargs, pool_key
from executor.policy.sandbox_policy import SandboxPolicy
from executor.spec import RunSpec

IMAGE = "undoable-sandbox:latest"
COMMAND = ["python3", "-I", "-S", "-c", "pass"]
LABELS = {"undoable.backend": "abc123", "undoable.owner": "host:42"}
POLICY = SandboxPolicy.of(Limits())
# Keys that would hand the sandbox something of the host's, or raise its privileges.
FORBIDDEN_KEYS = {
    "volumes",
    "mounts",
    "binds",
    "devices",
    "device_requests",
    "cap_add",
    "pid_mode",
    "userns_mode",
    "uts_mode",
    "volumes_from",
    "sysctls",
    "runtime",
    "group_add",
    "extra_hosts",
    "ports",
}


def build(**limits: object) -> dict:
    return container_create_kwargs(
        SandboxPolicy.of(Limits(**limits)), image=IMAGE, command=COMMAND, labels=LABELS
    )


def test_it_gives_no_network():
    kwargs = build()
    assert kwargs["network_mode"] == "none"
    assert kwargs["network_disabled"] is True


def test_it_drops_every_capability_and_never_runs_privileged():
    kwargs = build()
    assert kwargs["cap_drop"] == ["ALL"]
    assert kwargs["privileged"] is False
    assert FORBIDDEN_KEYS.isdisjoint(kwargs)


def test_it_forbids_new_privileges_and_keeps_the_default_seccomp_profile():
    options = build()["security_opt"]
    assert options == ["no-new-privileges"]
    assert not [o for o in options if "seccomp" in o or "apparmor" in o or "label" in o]


def test_it_runs_as_the_unprivileged_sandbox_user_on_a_read_only_root():
    kwargs = build()
    assert kwargs["user"] == "1000:1000"
    assert kwargs["read_only"] is True


def test_it_gives_size_capped_private_tmpfs_for_workspace_and_tmp():
    tmpfs = build(workdir_quota_mib=32, tmp_quota_mib=8)["tmpfs"]
    assert set(tmpfs) == {"/workspace", "/tmp"}
    assert f"size={32 * 1024 * 1024}," in tmpfs["/workspace"]
    assert f"size={8 * 1024 * 1024}," in tmpfs["/tmp"]
    assert all(
        "nosuid" in opts and "nodev" in opts and "uid=1000" in opts for opts in tmpfs.values()
    )


def test_a_fractional_quota_becomes_whole_bytes_not_extra_mount_options():
    tmpfs = build(workdir_quota_mib=1.5)["tmpfs"]["/workspace"]
    assert tmpfs == "rw,exec,nosuid,nodev,size=1572864,uid=1000,gid=1000,mode=0700"


def test_memory_and_swap_limits_are_equal_so_there_is_no_swap():
    kwargs = build(memory_mib=128)
    assert kwargs["mem_limit"] == kwargs["memswap_limit"] == 128 * 1024 * 1024


def test_it_bounds_pids_cpu_and_open_files():
    kwargs = build(max_pids=20, max_open_files=100)
    assert kwargs["pids_limit"] == 21  # the program's 20 plus the supervisor
    assert kwargs["nano_cpus"] == 1_000_000_000
    assert {"name": "nofile", "soft": 100, "hard": 100} in kwargs["ulimits"]
    assert {"name": "core", "soft": 0, "hard": 0} in kwargs["ulimits"]


def test_it_keeps_no_logs_and_removes_the_container_when_it_ends():
    kwargs = build()
    assert kwargs["log_config"]["type"] == "none"
    assert kwargs["auto_remove"] is True


def test_it_passes_no_environment_at_all(monkeypatch):
    monkeypatch.setenv("UNDOABLE_CANARY_SECRET", "canary-7f3a")
    kwargs = build()
    assert kwargs["environment"] == {}
    assert "canary-7f3a" not in json.dumps(kwargs)


def test_it_refuses_a_network_mode_it_cannot_enforce():
    with pytest.raises(InvalidLimits):
        build(network="allowlist")


@pytest.mark.parametrize(
    "image", ["", "img --privileged", "img\nprivileged", "-v/:/host", "../img", "IMG:latest"]
)
def test_it_rejects_an_image_name_that_could_smuggle_options(image):
    with pytest.raises(InvalidSpec):
        container_create_kwargs(POLICY, image=image, command=COMMAND, labels=LABELS)


@pytest.mark.parametrize("labels", [{"undoable.sandbox": "0"}, {"com.docker.x": "1"}, {"a": "b"}])
def test_it_rejects_labels_that_could_hide_a_container_from_the_reaper(labels):
    with pytest.raises(InvalidSpec):
        container_create_kwargs(POLICY, image=IMAGE, command=COMMAND, labels=labels)


def test_every_container_carries_the_sandbox_label():
    assert build()["labels"] == {**LABELS, "undoable.sandbox": "1"}


@pytest.mark.parametrize("command", [[], "python3 -c pass", [b"python3"]])
def test_it_rejects_a_command_that_is_not_a_list_of_strings(command):
    with pytest.raises(InvalidSpec):
        container_create_kwargs(POLICY, image=IMAGE, command=command, labels=LABELS)


def test_per_run_limits_share_a_pool_but_creation_limits_do_not():
    caps = Limits()
    assert pool_key(caps.narrowed(wall_time_s=1, cpu_time_s=1, max_output_bytes=10)) == pool_key(
        caps
    )
    assert pool_key(caps.narrowed(memory_mib=64)) != pool_key(caps)
    assert pool_key(caps.narrowed(max_pids=8)) != pool_key(caps)


def test_the_run_message_carries_the_environment_only_on_stdin():
    spec = RunSpec(code="print(1)", env={"TOKEN": "s3cret"}, files={"a/b.txt": b"\xff"})
    message = encode_message(spec, Limits(wall_time_s=2))
    body = json.loads(message[5:])
    assert message[:1] == b"j"
    assert int.from_bytes(message[1:5], "big") == len(message) - 5
    assert body["env"] == {"TOKEN": "s3cret"}
    assert body["files"] == {"a/b.txt": "/w=="}
    assert body["wall_time_s"] == 2


def test_the_run_message_carries_the_image_caps():
    body = json.loads(encode_message(RunSpec(code="pass"), Limits())[5:])
    assert (body["max_images"], body["max_image_bytes"]) == (
        IMAGE_CAPS.max_count,
        IMAGE_CAPS.max_image_bytes,
    )


def test_a_session_binds_its_workspace_folder_and_nothing_else(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    policy = SandboxPolicy.of(Limits(), workspace=workspace)
    kwargs = container_create_kwargs(policy, image=IMAGE, command=COMMAND, labels=LABELS)
    assert [(m["Type"], m["Source"], m["Target"]) for m in kwargs["mounts"]] == [
        ("bind", str(workspace), "/workspace")
    ]
    assert list(kwargs["tmpfs"]) == ["/tmp"]
    assert (FORBIDDEN_KEYS - {"mounts"}).isdisjoint(kwargs)


@pytest.mark.parametrize("where", ["relative", "link", "missing"])
def test_a_workspace_that_is_not_a_canonical_folder_is_refused(tmp_path, where):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    path = {"relative": "real", "link": str(tmp_path / "link"), "missing": str(tmp_path / "no")}
    with pytest.raises(InvalidSpec, match="canonical"):
        policy = SandboxPolicy.of(Limits(), workspace=Path(path[where]))
        container_create_kwargs(policy, image=IMAGE, command=COMMAND, labels=LABELS)
