"""The bwrap sandbox policy as pure functions: command line, rlimits, seccomp filter."""

import errno
import marshal
import os
from pathlib import Path

import pyseccomp as seccomp
import pytest

from executor.errors import InvalidLimits, InvalidSpec
from executor.limits import Limits
from executor.policy.bwrap_args import (
    IMAGE_CAPS,
    LAUNCHER,
    SandboxFds,
    bwrap_argv,
    driver_payload,
    driver_source,
    launch_argv,
)
from executor.policy.mounts import CONTROL_DIR, Mount, bwrap_mount_args
from executor.policy.sandbox_policy import BASE_ENV, SandboxPolicy, program_env
from executor.policy.seccomp import DENIED_SYSCALLS, TIOCSTI, build_filter, seccomp_bpf
from tests.prerequisites import ROOTFS as REAL_ROOTFS

ROOTFS = "/srv/sandbox-rootfs"
FDS = SandboxFds(seccomp=7, job=8, status=9)
REQUIRED_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "userfaultfd",
    "perf_event_open",
    "mount",
    "umount2",
    "unshare",
    "setns",
    "pivot_root",
    "chroot",
    "kexec_load",
    "init_module",
)


def argv(limits: Limits | None = None, rootfs: str = ROOTFS, mounts=()) -> list[str]:
    policy = SandboxPolicy.of(limits or Limits(), mounts=mounts)
    return bwrap_argv(policy, rootfs=rootfs, fds=FDS)


def bwrap_part(args: list[str]) -> list[str]:
    command = args.index("--", args.index("bwrap"))
    return args[args.index("bwrap") : command]


def option_values(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == option]


def test_it_unshares_every_namespace_and_forbids_new_user_namespaces():
    args = bwrap_part(argv())
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--new-session"):
        assert flag in args
    assert "--die-with-parent" in args
    assert "--share-net" not in args


def test_it_drops_every_capability_and_runs_as_the_sandbox_user():
    args = bwrap_part(argv())
    assert option_values(args, "--cap-drop") == ["ALL"]
    assert "--cap-add" not in args
    assert option_values(args, "--uid") == ["1000"]
    assert option_values(args, "--gid") == ["1000"]


def test_it_mounts_the_rootfs_read_only_as_root_and_nothing_else_from_the_host():
    args = bwrap_part(argv())
    assert option_values(args, "--ro-bind") == [ROOTFS]
    assert args[args.index("--ro-bind") + 2] == "/"
    for writable_host_mount in ("--bind", "--dev-bind", "--bind-try", "--dev-bind-try"):
        assert writable_host_mount not in args


def test_it_remounts_root_read_only_after_every_mount():
    args = bwrap_part(argv())
    last_mount = max(i for i, a in enumerate(args) if a in ("--tmpfs", "--proc", "--dev"))
    assert args.index("--remount-ro") > last_mount
    assert "/" in option_values(args, "--remount-ro")


def test_it_never_shows_host_home_root_work_or_the_docker_socket():
    args = bwrap_part(argv())
    for host_path in ("/home", "/root", "/work", "/var/run", "/run", "/etc/shadow"):
        assert not [a for a in args if a == host_path or a.startswith(host_path + "/")]
    assert not [a for a in args if "docker.sock" in a]


def test_it_caps_the_writable_workdir_and_tmp_by_the_quotas():
    args = bwrap_part(argv(Limits(workdir_quota_mib=3, tmp_quota_mib=5)))
    sizes = dict(zip(option_values(args, "--tmpfs"), option_values(args, "--size"), strict=True))
    assert sizes["/workspace"] == str(3 * 1024 * 1024)
    assert sizes["/tmp"] == str(5 * 1024 * 1024)
    assert "/dev/shm" in sizes


def test_it_passes_only_the_base_environment_on_the_command_line():
    args = bwrap_part(argv())
    assert option_values(args, "--setenv") == list(BASE_ENV)


def test_it_keeps_a_hostile_rootfs_path_one_argument():
    hostile = "/srv/x --bind / /host"
    args = argv(rootfs=hostile)
    assert option_values(args, "--ro-bind") == [hostile]
    assert "/host" not in args


def test_it_rejects_a_relative_rootfs():
    with pytest.raises(InvalidLimits):
        argv(rootfs="--bind")


def test_it_refuses_network_access_it_cannot_confine():
    with pytest.raises(InvalidLimits):
        argv(Limits(network="allowlist"))


def test_it_hands_bwrap_the_seccomp_filter_and_the_driver_its_fds():
    args = argv()
    assert option_values(bwrap_part(args), "--seccomp") == ["7"]
    caps = [str(IMAGE_CAPS.max_count), str(IMAGE_CAPS.max_image_bytes)]
    assert args[-4:] == ["8", "9", *caps]
    assert args[-7:-5] == ["-I", "-c"]


def test_the_driver_source_is_valid_python():
    compile(driver_source(), "driver", "exec")


def test_the_driver_travels_compiled_to_a_rootfs_with_our_python():
    real_rootfs = str(REAL_ROOTFS)
    payload = driver_payload(real_rootfs)
    body = payload[5:]
    assert int.from_bytes(payload[1:5], "big") == len(body)
    assert payload[:1] == b"M"
    assert marshal.loads(body).co_filename == "<string>"


def test_the_driver_travels_as_source_to_a_rootfs_with_another_python(tmp_path):
    # No compiled stdlib of our version: our bytecode might not load there.
    payload = driver_payload(str(tmp_path))
    assert (
        payload
        == b"S" + len(driver_source().encode()).to_bytes(4, "big") + driver_source().encode()
    )


def test_the_command_line_carries_a_bootstrap_reading_the_job_fd_not_the_driver():
    program = argv()[argv().index("--", argv().index("bwrap")) + 1 :]
    assert program[:3] == ["/usr/bin/python3", "-I", "-c"]
    assert f"os.read({FDS.job}," in program[3]
    caps = [str(IMAGE_CAPS.max_count), str(IMAGE_CAPS.max_image_bytes)]
    assert program[4:] == [str(FDS.job), str(FDS.status), *caps]
    assert len(program[3]) < 500


def test_program_env_is_the_base_plus_only_the_allowlist():
    env = program_env({"API_TOKEN": "t0k"})
    assert env == {**BASE_ENV, "API_TOKEN": "t0k"}


def test_rlimits_forbid_core_dumps_and_follow_the_limits():
    limits = Limits(cpu_time_s=2.5, max_pids=7, max_open_files=33, max_file_size_mib=2)
    rlimits = SandboxPolicy.of(limits).rlimits(memory_cgroup=True)
    assert rlimits["RLIMIT_CORE"] == (0, 0)
    assert rlimits["RLIMIT_CPU"] == (3, 4)
    assert rlimits["RLIMIT_NPROC"] == (7, 7)
    assert rlimits["RLIMIT_NOFILE"] == (33, 33)
    assert rlimits["RLIMIT_FSIZE"] == (2 * 1024 * 1024,) * 2


def test_address_space_is_the_memory_limit_without_a_memory_cgroup():
    limits = Limits(memory_mib=100)
    assert (
        SandboxPolicy.of(limits).rlimits(memory_cgroup=False)["RLIMIT_AS"]
        == (limits.memory_bytes,) * 2
    )
    assert (
        SandboxPolicy.of(limits).rlimits(memory_cgroup=True)["RLIMIT_AS"][0] > limits.memory_bytes
    )


def _pfc() -> str:
    import tempfile

    with tempfile.TemporaryFile("w+") as out:
        build_filter().export_pfc(out)
        out.seek(0)
        return out.read()


def test_the_seccomp_filter_denies_every_required_syscall_with_eperm():
    pfc = _pfc()
    native = seccomp.system_arch()
    assert set(REQUIRED_DENIED) <= set(DENIED_SYSCALLS)
    for name in REQUIRED_DENIED:
        number = seccomp.resolve_syscall(native, name)
        assert f"if ($syscall == {number})" in pfc, name
    assert f"action ERRNO({errno.EPERM})" in pfc


def test_the_seccomp_filter_denies_tiocsti_but_not_every_ioctl():
    pfc = _pfc()
    ioctl = seccomp.resolve_syscall(seccomp.system_arch(), "ioctl")
    assert f"if ($syscall == {ioctl})" in pfc
    assert str(TIOCSTI) in pfc or hex(TIOCSTI) in pfc


def test_the_seccomp_filter_kills_foreign_abis():
    pfc = _pfc()
    assert "action KILL" in pfc


def test_the_compiled_filter_is_a_whole_number_of_bpf_instructions():
    program = seccomp_bpf()
    assert program
    assert len(program) % 8 == 0


# -- bind mounts (executor/policy/mounts.py) ---------------------------------------------------


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A real folder by its canonical path (what the undoable kinds hand over)."""
    made = tmp_path / "tree"
    made.mkdir()
    return made.resolve()


def test_mounts_are_bound_over_the_scratch_tmpfs_and_before_the_read_only_remount(folder):
    args = bwrap_part(argv(mounts=[Mount(folder, "/workspace", writable=True)]))
    bind = args.index("--bind")
    assert args[bind : bind + 3] == ["--bind", str(folder), "/workspace"]
    assert bind > max(i for i, a in enumerate(args) if a == "--tmpfs")
    assert bind < args.index("--remount-ro")


def test_a_read_only_control_folder_gets_its_own_run_tmpfs(folder):
    args = bwrap_mount_args([Mount(folder, CONTROL_DIR)])
    assert args == ["--tmpfs", "/run", "--ro-bind", str(folder), CONTROL_DIR]


def test_no_mounts_adds_no_argument():
    assert bwrap_mount_args([]) == []
    assert "--bind" not in argv(mounts=())


@pytest.mark.parametrize(
    "dest",
    ["/", "/etc", "/workspace/sub", "/workspace/../etc", "/run", "/run/undoable/..", "workspace"],
)
def test_it_refuses_a_destination_outside_the_allowed_two(folder, dest):
    with pytest.raises(InvalidSpec, match="destination"):
        bwrap_mount_args([Mount(folder, dest)])


def test_it_refuses_a_relative_host_path(folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    with pytest.raises(InvalidSpec, match="absolute"):
        bwrap_mount_args([Mount(Path("tree"), "/workspace")])


def test_it_refuses_dot_dot_in_the_host_path(folder):
    sneaky = Path(f"{folder}/../tree")
    assert sneaky.is_dir()
    with pytest.raises(InvalidSpec, match="canonical"):
        bwrap_mount_args([Mount(sneaky, "/workspace")])


def test_it_refuses_a_symlinked_host_folder(folder):
    link = folder.parent / "link"
    link.symlink_to(folder)
    with pytest.raises(InvalidSpec, match="canonical"):
        bwrap_mount_args([Mount(link, "/workspace", writable=True)])


def test_it_refuses_a_symlink_to_a_host_system_folder_on_the_way(folder):
    (folder / "up").symlink_to("/")
    with pytest.raises(InvalidSpec, match="canonical"):
        bwrap_mount_args([Mount(folder / "up" / "etc", "/workspace")])


def test_it_refuses_a_missing_folder_and_a_plain_file(folder):
    (folder / "file").write_text("x")
    for source in (folder / "gone", folder / "file"):
        with pytest.raises(InvalidSpec, match="existing folder"):
            bwrap_mount_args([Mount(source, "/workspace")])


def test_it_refuses_two_mounts_on_one_destination(folder):
    other = folder / "other"
    other.mkdir()
    with pytest.raises(InvalidSpec, match="two mounts"):
        bwrap_mount_args([Mount(folder, "/workspace"), Mount(other, "/workspace")])


def test_a_hostile_host_folder_name_stays_one_argument(folder):
    hostile = folder / "x --dev-bind .. --host"
    os.mkdir(hostile)
    args = argv(mounts=[Mount(hostile, CONTROL_DIR)])
    assert option_values(bwrap_part(args), "--ro-bind") == [ROOTFS, str(hostile)]
    assert "--host" not in args


def test_bwrap_argv_checks_its_mounts_too(folder):
    with pytest.raises(InvalidSpec):
        argv(mounts=[Mount(folder, "/etc", writable=True)])


# -- what a session changes: workdir bind, own command, extra env, not PID 1 -------------------

SESSION_COMMAND = ["/usr/bin/python3", "-c", "print('repl')", "8", "9", "{}"]


def session_argv(folder: Path | None = None, mounts=(), **overrides) -> list[str]:
    policy = SandboxPolicy.of(Limits(), mounts=mounts, workspace=folder)
    return bwrap_argv(policy, rootfs=ROOTFS, fds=FDS, **overrides)


def test_a_workdir_bind_replaces_the_workspace_tmpfs_with_the_host_folder(folder):
    args = bwrap_part(session_argv(folder))
    assert "/workspace" not in option_values(args, "--tmpfs")
    assert "0700" not in option_values(args, "--perms")
    bind = args.index("--bind")
    assert args[bind : bind + 3] == ["--bind", str(folder), "/workspace"]
    assert bind < args.index("--remount-ro")
    assert option_values(args, "--chdir") == ["/workspace"]


def test_a_workdir_bind_with_spaces_and_a_leading_dash_stays_one_argument(folder):
    hostile = folder / "-x --bind .. host"
    os.mkdir(hostile)
    args = bwrap_part(session_argv(hostile))
    assert option_values(args, "--bind") == [str(hostile)]
    assert "host" not in args


def test_it_refuses_a_relative_workdir_bind(folder, monkeypatch):
    monkeypatch.chdir(folder.parent)
    for relative in (Path("tree"), Path("--bind")):
        with pytest.raises(InvalidSpec, match="absolute"):
            session_argv(relative)


def test_it_refuses_a_symlinked_workdir_bind(folder):
    link = folder.parent / "link"
    link.symlink_to("/")
    with pytest.raises(InvalidSpec, match="canonical"):
        session_argv(link)


def test_it_refuses_a_workdir_bind_and_a_workspace_mount_together(folder):
    with pytest.raises(InvalidSpec, match="two mounts"):
        session_argv(folder, mounts=[Mount(folder, "/workspace")])


def test_a_command_replaces_the_one_shot_driver_after_the_separator():
    args = session_argv(command=SESSION_COMMAND)
    assert args[-len(SESSION_COMMAND) - 1 :] == ["--", *SESSION_COMMAND]
    assert driver_source() not in args


def test_a_command_argument_with_a_leading_dash_is_never_a_bwrap_option():
    args = session_argv(command=["/bin/echo", "--bind", "/", "/host"])
    assert args[-5:] == ["--", "/bin/echo", "--bind", "/", "/host"]
    assert option_values(bwrap_part(args), "--bind") == []


@pytest.mark.parametrize("command", [[], ["python3", "-c", "1"], "/bin/sh -c id"])
def test_it_refuses_a_command_without_an_absolute_program(command):
    with pytest.raises(InvalidSpec, match="absolute program"):
        session_argv(command=command)


def test_extra_env_comes_after_the_base_environment():
    args = bwrap_part(session_argv(extra_env={"PIP_USER": "1"}))
    assert option_values(args, "--setenv") == [*BASE_ENV, "PIP_USER"]
    assert args[args.index("PIP_USER") + 1] == "1"


@pytest.mark.parametrize("name", ["", "A=B", "A\0B"])
def test_it_refuses_a_bad_extra_env_name(name):
    with pytest.raises(InvalidSpec, match="environment variable"):
        session_argv(extra_env={name: "x"})


def test_the_program_is_pid_1_unless_told_otherwise():
    assert "--as-pid-1" in bwrap_part(argv())
    assert "--as-pid-1" not in bwrap_part(session_argv(as_pid_1=False))


def test_a_session_keeps_every_other_part_of_the_policy(folder):
    one_shot = bwrap_part(argv())
    session = bwrap_part(
        session_argv(folder, command=SESSION_COMMAND, extra_env={"X": "1"}, as_pid_1=False)
    )
    workspace_tmpfs = one_shot.index("/workspace") - 5
    expected = [
        *one_shot[:workspace_tmpfs],
        "--bind",
        str(folder),
        "/workspace",
        *one_shot[workspace_tmpfs + 6 :],
        "--setenv",
        "X",
        "1",
    ]
    expected.remove("--as-pid-1")
    assert session == expected


def test_the_launcher_joins_the_cgroups_drops_to_the_host_uid_and_hard_kills_bwrap():
    procs = ["/sys/fs/cgroup/memory/x/cgroup.procs", "/sys/fs/cgroup/pids/x/cgroup.procs"]
    command = launch_argv(argv(), cgroup_procs=procs, host_uid=65534, hard_limit_s=10)
    assert command == [
        LAUNCHER,
        "--cgroup-procs",
        procs[0],
        "--cgroup-procs",
        procs[1],
        "--uid",
        "65534",
        "--kill-after",
        "15",
        "--",
        *argv(),
    ]
    assert os.path.isabs(LAUNCHER)


def test_the_launcher_adds_nothing_it_is_not_asked_for():
    command = launch_argv(argv(), cgroup_procs=(), host_uid=None, hard_limit_s=2.9)
    assert command == [LAUNCHER, "--kill-after", "7", "--", *argv()]


def test_a_hostile_cgroup_path_stays_one_argument():
    hostile = "/sys/fs/cgroup/x; rm -rf / #/cgroup.procs"
    command = launch_argv(["true"], cgroup_procs=[hostile], host_uid=None, hard_limit_s=1)
    assert command[1:3] == ["--cgroup-procs", hostile]
