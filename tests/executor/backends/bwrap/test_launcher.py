"""The sandbox launcher (executor/launcher/undoable-launch.c), run for real, outside bwrap.

It is the one step of every sandbox that runs with the server's own privileges (root here), so
each of its jobs is checked for the hostile case: it must never run the program after a step
failed, never leave root or a capability behind, and always enforce the deadline.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from executor.linux import cgroups
from executor.linux.cgroups import SandboxCgroup
from executor.policy.bwrap_args import LAUNCHER

FAILED = 125
NOBODY = 65534
CAP_NET_RAW = 13

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")


def launch(*args: str, timeout_s: float = 30, **popen) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAUNCHER, *args], capture_output=True, text=True, timeout=timeout_s, env={}, **popen
    )


def status_of(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def status_with_ambient_net_raw(*launch_with: str) -> dict[str, str]:
    """/proc/self/status of `cat`, started with CAP_NET_RAW inheritable and ambient, through
    `launch_with` (a launcher command line up to its program) or directly."""
    done = subprocess.run(
        ["setpriv", "--inh-caps=+net_raw", "--ambient-caps=+net_raw", "--", *launch_with]
        + ["/bin/cat", "/proc/self/status"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return status_of(done.stdout)


def test_it_drops_to_the_uid_with_no_groups_and_no_capabilities_of_any_kind():
    # The caller holds a supplementary group and an inheritable + ambient capability; none of
    # them may reach the program.
    groups = os.getgroups()
    os.setgroups([4])
    try:
        status = status_with_ambient_net_raw(LAUNCHER, "--uid", str(NOBODY), "--")
    finally:
        os.setgroups(groups)
    assert status["Uid"].split() == [str(NOBODY)] * 4
    assert status["Gid"].split() == [str(NOBODY)] * 4
    assert status["Groups"].strip() == ""
    for caps in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[caps], 16) == 0, caps


def test_the_ambient_capability_really_was_there_to_be_dropped():
    # Without the launcher the same setpriv call does pass CAP_NET_RAW on: the test above can fail.
    assert int(status_with_ambient_net_raw()["CapAmb"], 16) & (1 << CAP_NET_RAW)


def test_the_dropped_program_cannot_become_root_again():
    code = "import os\ntry:\n    os.setuid(0)\nexcept PermissionError:\n    print('refused')"
    result = launch("--uid", str(NOBODY), "--", "/usr/bin/python3", "-c", code)
    assert (result.returncode, result.stdout) == (0, "refused\n")


ECHO = ["/bin/echo", "ran"]


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--"],
        ["--uid"],
        ECHO,
        ["--uid", "0", "--", *ECHO],
        ["--uid", "-1", "--", *ECHO],
        ["--uid", "65534x", "--", *ECHO],
        ["--uid", "", "--", *ECHO],
        ["--uid", str(NOBODY), "--uid", "1", "--", *ECHO],
        ["--kill-after", "99999999999", "--", *ECHO],
        ["--kill-after", "1", "--kill-after", "2", "--", *ECHO],
        ["--bogus", "1", "--", *ECHO],
        [*["--cgroup-procs", "/x"] * 17, "--", *ECHO],
    ],
    ids=lambda args: " ".join(args)[:40] or "nothing",
)
def test_bad_arguments_run_nothing(args):
    result = launch(*args)
    assert result.returncode == FAILED
    assert result.stdout == ""
    assert result.stderr.startswith("undoable-launch: ")


def test_a_cgroup_it_cannot_join_stops_everything(tmp_path):
    missing = tmp_path / "gone" / "cgroup.procs"
    result = launch("--cgroup-procs", str(missing), "--", "/bin/echo", "ran")
    assert (result.returncode, result.stdout) == (FAILED, "")
    assert str(missing) in result.stderr


def test_a_symlinked_cgroup_file_is_not_followed(tmp_path):
    target = tmp_path / "somewhere-else"
    target.write_text("")
    (tmp_path / "cgroup.procs").symlink_to(target)
    result = launch("--cgroup-procs", str(tmp_path / "cgroup.procs"), "--", "/bin/echo", "ran")
    assert (result.returncode, result.stdout) == (FAILED, "")
    assert target.read_text() == ""


def test_it_joins_the_cgroups_before_the_program_starts():
    parents = cgroups.available_parents()
    if not parents:
        pytest.skip("this host gives us no cgroups to create")
    group = SandboxCgroup.create(parents)
    try:
        result = launch(
            *[arg for procs in group.procs_files for arg in ("--cgroup-procs", procs)],
            "--uid",
            str(NOBODY),
            "--",
            "/bin/cat",
            "/proc/self/cgroup",
        )
        assert result.returncode == 0, result.stderr
        membership = {
            names: path
            for _, names, path in (line.split(":", 2) for line in result.stdout.splitlines())
        }
        for controller, folder in group.dirs.items():
            (names,) = [names for names in membership if controller in names.split(",")]
            assert folder.endswith(membership[names])
    finally:
        group.remove()


def test_it_sigkills_the_program_at_the_deadline_and_reaps_it():
    marker = "61.2345"
    result = launch("--kill-after", "1", "--", "/bin/sleep", marker)
    assert result.returncode == 128 + signal.SIGKILL
    assert not [pid for pid in _pids() if marker in _cmdline(pid)]


def test_it_reports_how_the_program_ended():
    assert launch("--kill-after", "30", "--", "/bin/sh", "-c", "exit 7").returncode == 7
    assert launch("--", "/bin/sh", "-c", "exit 7").returncode == 7
    killed = launch("--kill-after", "30", "--", "/bin/sh", "-c", "kill -SEGV $$")
    assert killed.returncode == 128 + signal.SIGSEGV
    assert launch("--", "/nonexistent/program").returncode == 127
    assert launch("--kill-after", "30", "--", "/nonexistent/program").returncode == 127


def test_a_termination_signal_is_passed_on_to_the_program():
    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
        "print('ready', flush=True)\n"
        "signal.pause()\n"
    )
    proc = subprocess.Popen(
        [LAUNCHER, "--kill-after", "60", "--", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 3
    finally:
        proc.kill()
        proc.wait()


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
