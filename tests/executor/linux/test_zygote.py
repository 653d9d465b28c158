"""The bwrap backend's zygote (docs/zygote.md): runs forked from one template share nothing,
cannot see or touch each other or the template, and sit in cgroups of their own.

The checks are functions of a backend, so the sabotage tests at the end can run them against a
zygote with one wall taken down and show that they notice. Real sandboxes on the real rootfs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executor import Limits, RunResult, RunSpec
from executor.backends.bwrap.backend import BwrapBackend
from executor.errors import SandboxFailed
from executor.linux import zygote
from executor.policy.mounts import Mount
from executor.policy.sandbox_policy import program_env
from tests.executor.backends.sabotaged_sources import sabotaged_child, sabotaged_driver
from tests.executor.cross_run import check_concurrent_runs_share_no_terminal
from tests.executor.exit_finalizers import check_cycles_are_finalized_at_exit
from tests.executor.host_processes import processes_of
from tests.prerequisites import ROOTFS as ROOTFS_PATH

ROOTFS = str(ROOTFS_PATH)
# A host uid no other test uses.
HOST_UID = 64125
CLOSE_UID = 64126
LIMITS = Limits(wall_time_s=10)
PORT = 4517


def make_backend(host_uid: int = HOST_UID) -> BwrapBackend:
    backend = BwrapBackend(ROOTFS, host_uid=host_uid, zygote=True)
    backend.self_check()
    return backend


@pytest.fixture(scope="module")
def backend() -> Iterator[BwrapBackend]:
    built = make_backend()
    yield built
    built.close()


def run(
    backend: BwrapBackend, code: str, limits: Limits = LIMITS, files: dict[str, bytes] | None = None
) -> RunResult:
    before = backend.zygote_runs
    result = backend.run(RunSpec(code=code, files=files or {}), limits=limits)
    assert backend.zygote_runs == before + 1, "the run did not come from the zygote"
    return result


LEAVE_TRACES = f"""
import os, random, socket, subprocess, json, typing
open('/tmp/left', 'w').write('x')
open('/workspace/left', 'w').write('x')
subprocess.Popen(['sleep', '60'], start_new_session=True)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(('127.0.0.1', {PORT}))
listener.listen()
if os.fork() == 0:  # a daemon keeps the listener open after the program ends
    os.setsid()
    import time
    time.sleep(60)
json.LEFT_BEHIND = typing.LEFT_BEHIND = True  # modules the template preloaded
os.environ['LEFT_BEHIND'] = '1'
print(random.random())
"""

FIND_TRACES = f"""
import os, random, socket, json, typing
found = [path for path in ('/tmp/left', '/workspace/left') if os.path.exists(path)]
for pid in (p for p in os.listdir('/proc') if p.isdigit()):
    if b'sleep' in open(f'/proc/{{pid}}/cmdline', 'rb').read():
        found.append('sleep process')
try:
    socket.create_connection(('127.0.0.1', {PORT}), timeout=1).close()
    found.append('listener')
except OSError:
    pass
if hasattr(json, 'LEFT_BEHIND') or hasattr(typing, 'LEFT_BEHIND') or 'LEFT_BEHIND' in os.environ:
    found.append('module state')
print(found)
print(random.random())
"""


def check_consecutive_runs_share_nothing(backend: BwrapBackend) -> None:
    first = run(backend, LEAVE_TRACES)
    second = run(backend, FIND_TRACES)
    assert (first.exit_code, second.exit_code) == (0, 0), second.stderr
    found, second_random = second.stdout.splitlines()
    assert found == "[]"
    assert first.stdout.strip() != second_random


WATCHED = """
import os, time
print(os.getpid(), flush=True)
time.sleep(4)
print('still alive')
"""

# Lists the processes it can see, then signals every pid but its own and its supervisor's.
INTRUDER = """
import os, signal
seen = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print(seen)
hit = []
for pid in range(1, 4096):
    if pid in (os.getpid(), os.getppid()):
        continue
    try:
        os.kill(pid, signal.SIGKILL)
        hit.append(pid)
    except OSError:
        pass
print(hit, flush=True)
os.kill(-1, signal.SIGKILL)  # everything this run may signal but its PID 1 and itself
"""


def check_a_concurrent_run_cannot_see_or_signal_another(backend: BwrapBackend) -> None:
    started = threading.Event()
    results: list[RunResult] = []

    def on_output(chunk: object) -> None:
        started.set()

    def watched() -> None:
        results.append(backend.run(RunSpec(code=WATCHED), limits=LIMITS, on_output=on_output))

    thread = threading.Thread(target=watched)
    thread.start()
    assert started.wait(10), "the watched run did not start"
    intruder = run(backend, INTRUDER)
    thread.join()
    seen, hit = intruder.stdout.splitlines()
    assert (seen, hit) == ("[1, 2]", "[]"), intruder.stderr
    assert results[0].stdout.splitlines()[1:] == ["still alive"]


REACH_FOR_THE_TEMPLATE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
traced = [pid for pid in range(1, 4096) if libc.ptrace(PTRACE_ATTACH, pid, 0, 0) == 0]
sockets = []
for fd in os.listdir('/proc/self/fd'):
    try:
        if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'):
            sockets.append(fd)
    except FileNotFoundError:  # the listing's own fd
        pass
print(traced)
print(sockets)
print(os.getppid())
"""


def check_a_run_cannot_reach_the_template(backend: BwrapBackend) -> None:
    keeper = backend._zygote
    template = keeper._template if keeper is not None else None
    assert template is not None and template.alive()
    result = run(backend, REACH_FOR_THE_TEMPLATE)
    # Nothing to trace, no socket to the template, and the parent is the run's own PID 1.
    assert result.stdout.splitlines() == ["[]", "[]", "1"], result.stderr
    assert template.alive() and keeper is not None and keeper._template is template


MEMORY_HOG = "hoard = []\nfor _ in range(64):\n    hoard.append(b'x' * (16 << 20))"


def check_the_memory_limit_is_the_runs_own(backend: BwrapBackend) -> None:
    result = run(backend, MEMORY_HOG, Limits(memory_mib=64, wall_time_s=5))
    assert (result.limit, result.oom_killed) == ("memory", True), result.stderr[-500:]


SPIN_IGNORING_TERM = """
import os, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    while True: pass
while True: pass
"""


def check_a_timed_out_run_is_killed_at_its_wall_time(backend: BwrapBackend) -> None:
    # SIGTERM ignored: the host's SIGKILL of the run's PID 1 (through its pidfd) must end it.
    # The result waits for the program's end: at the host's kill, 1.5 s in, if it worked;
    # otherwise at the template's own hard kill, 5 s later.
    hard_kill_s = backend.term_grace_s + 1 + zygote.HARD_KILL_GRACE_S
    started = time.monotonic()
    result = run(backend, SPIN_IGNORING_TERM, Limits(wall_time_s=1))
    assert result.limit == "wall_time", result.stderr[-500:]
    assert time.monotonic() - started < hard_kill_s / 2, "the run outlived the host's kill"
    assert backend.wait_idle(30)


# Modules that draw or hold random state: preloaded, every run would fork the same state.
STATEFUL_MODULES = ("random", "_random", "tempfile", "uuid", "secrets", "_hashlib", "_ssl")
LOADED_BEFORE_THE_PROGRAM = f"""
import sys
print(sorted(name for name in {STATEFUL_MODULES!r} if name in sys.modules))
print('typing' in sys.modules)
"""


def check_preloaded_modules_hold_no_random_state(backend: BwrapBackend) -> None:
    result = run(backend, LOADED_BEFORE_THE_PROGRAM)
    assert result.exit_code == 0, result.stderr
    stateful, typing_preloaded = result.stdout.splitlines()
    assert stateful == "[]"
    assert typing_preloaded == "True"  # the zygote preloads: this check is not vacuous


def test_two_consecutive_runs_share_nothing(backend):
    check_consecutive_runs_share_nothing(backend)


def test_a_concurrent_run_cannot_see_or_signal_another(backend):
    check_a_concurrent_run_cannot_see_or_signal_another(backend)


def test_preloaded_modules_hold_no_random_state(backend):
    check_preloaded_modules_hold_no_random_state(backend)


def test_a_jobs_own_module_wins_over_a_preloaded_one(backend):
    files = {"string.py": b"WHOSE = 'the job'\n", "json/__init__.py": b"WHOSE = 'the job'\n"}
    result = run(backend, "import string, json; print(string.WHOSE, json.WHOSE)", files=files)
    assert (result.exit_code, result.stdout) == (0, "the job the job\n"), result.stderr


def test_a_run_cannot_reach_the_template(backend):
    check_a_run_cannot_reach_the_template(backend)


def check_a_runs_environment_is_its_jobs_alone(backend: BwrapBackend) -> None:
    env = {"TOKEN": "t0k"}
    before = backend.zygote_runs
    code = "import os; print(sorted(os.environ.items()))"
    result = backend.run(RunSpec(code=code, env=env), limits=LIMITS)
    assert backend.zygote_runs == before + 1
    assert result.stdout == f"{sorted(program_env(env).items())}\n", result.stderr


def test_a_runs_environment_is_its_jobs_alone(backend):
    check_a_runs_environment_is_its_jobs_alone(backend)


def check_a_run_gets_the_base_environment_not_the_templates(backend: BwrapBackend) -> None:
    # A job without variables of its own has the environment the template set for runs, which
    # the driver then leaves as it is.
    result = run(backend, "import os; print(sorted(os.environ.items()))")
    assert result.stdout == f"{sorted(program_env({}).items())}\n", result.stderr


def _template_started_with_a_variable_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    real = zygote.bwrap_argv
    monkeypatch.setattr(
        zygote,
        "bwrap_argv",
        lambda policy, **kw: real(policy, **kw, extra_env={"TEMPLATES_OWN": "left"}),
    )


def test_a_run_gets_the_base_environment_not_the_templates(monkeypatch):
    _template_started_with_a_variable_of_its_own(monkeypatch)
    built = make_backend()
    try:
        check_a_run_gets_the_base_environment_not_the_templates(built)
    finally:
        built.close()


def test_a_memory_hog_hits_its_own_cgroup_and_is_named(backend):
    check_the_memory_limit_is_the_runs_own(backend)


def test_a_timed_out_run_is_killed_at_its_wall_time(backend):
    check_a_timed_out_run_is_killed_at_its_wall_time(backend)


def test_the_program_runs_without_capabilities_or_new_privileges(backend):
    result = run(backend, "print(open('/proc/self/status').read())")
    status = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    caps = {key: status[key].strip() for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    assert set(caps.values()) == {"0000000000000000"}
    assert (status["NoNewPrivs"].strip(), status["Seccomp"].strip()) == ("1", "2")


# clone(2) with CLONE_NEWUSER: seccomp cannot see clone's flags, the namespace limit must hold.
CLONE_A_USER_NAMESPACE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
SYS_clone, CLONE_NEWUSER, SIGCHLD = 56, 0x10000000, 17
pid = libc.syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
print(pid, os.strerror(ctypes.get_errno()))
"""


def check_a_run_cannot_make_a_user_namespace(backend: BwrapBackend) -> None:
    result = run(backend, CLONE_A_USER_NAMESPACE)
    assert result.stdout == "-1 No space left on device\n", result.stderr


def test_a_run_cannot_make_a_user_namespace(backend):
    check_a_run_cannot_make_a_user_namespace(backend)


def test_a_run_has_its_own_hostname_and_only_loopback(backend):
    code = "import socket\nprint(socket.gethostname(), [n for _, n in socket.if_nameindex()])"
    result = run(backend, code)
    assert result.stdout == "sandbox ['lo']\n", result.stderr


def test_the_template_is_replaced_when_it_dies(backend):
    keeper = backend._zygote
    assert keeper is not None and keeper._template is not None
    old = keeper._template
    assert old.host.cgroup is not None
    old.host.cgroup.kill_all()
    old.host.proc.wait(timeout=10)
    result = backend.run(RunSpec(code="print(6*7)"), limits=LIMITS)
    assert result.stdout == "42\n"
    assert keeper._template is not None and keeper._template is not old


def test_an_old_template_is_retired_once_its_runs_are_done():
    built = make_backend(CLOSE_UID)
    try:
        keeper = built._zygote
        assert keeper is not None and keeper._template is not None
        first = keeper._template
        keeper._max_age_s = 0.0
        hashes = [run(built, "print(hash('seed'))").stdout for _ in range(2)]
        assert built.wait_idle(30)
        assert keeper._template is not first and not first.alive()
        # Each template draws its own string hash seed.
        assert hashes[0] != hashes[1]
    finally:
        built.close()
    assert processes_of(CLOSE_UID) == []


def test_runs_with_mounts_fall_back_to_a_sandbox(backend):
    base = Path(ROOTFS).parent / "tmp"
    base.mkdir(exist_ok=True)
    base.chmod(0o711)
    folder = Path(tempfile.mkdtemp(prefix="mounted-", dir=base)).resolve()
    os.chown(folder, HOST_UID, HOST_UID)
    before = (backend.stats["cold"], backend.zygote_runs)
    try:
        mounts = [Mount(folder, "/workspace", writable=True)]
        result = backend.run(RunSpec(code="print(6*7)"), limits=LIMITS, mounts=mounts)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.stdout == "42\n", result.stderr
    assert (backend.stats["cold"], backend.zygote_runs) == (before[0] + 1, before[1])


# Sabotage: one wall of the zygote taken down; the checks above must notice.


def assert_caught(
    check: Callable[[BwrapBackend], None], make: Callable[[], BwrapBackend] = make_backend
) -> None:
    """The check fails on a zygote built (by `make`) with the sabotage in place."""
    sabotaged = make()
    try:
        with pytest.raises(AssertionError):
            check(sabotaged)
    finally:
        sabotaged.close()


def test_sabotage_no_pid_namespace_is_refused_by_the_host(monkeypatch):
    sabotaged_child(
        monkeypatch, "CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |", "CLONE_NEWUSER | CLONE_NEWNS |"
    )
    sabotaged_child(
        monkeypatch, '    _mount(b"proc", b"/proc"', '    0 and _mount(b"proc", b"/proc"'
    )
    sabotaged = make_backend()
    try:
        # The host's check (its first process must be PID 1 of a namespace of its own) refuses
        # every such run, so the zygote is switched off and runs use sandboxes.
        assert sabotaged._zygote is None
    finally:
        sabotaged.close()


def test_sabotage_no_pid_namespace_is_caught_by_the_deny_test(monkeypatch):
    sabotaged_child(
        monkeypatch, "CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID |", "CLONE_NEWUSER | CLONE_NEWNS |"
    )
    sabotaged_child(
        monkeypatch, '    _mount(b"proc", b"/proc"', '    0 and _mount(b"proc", b"/proc"'
    )
    monkeypatch.setattr(zygote, "nspid", lambda pid: ["1"])
    sabotaged = make_backend()
    try:
        # The intruder now sees and kills processes outside its run, the one that holds its own
        # supervisor among them: the check fails, or the run breaks before it can.
        with pytest.raises((AssertionError, SandboxFailed)):
            check_a_concurrent_run_cannot_see_or_signal_another(sabotaged)
    finally:
        sabotaged.close()


def test_sabotage_no_cgroup_placement_is_caught_by_the_memory_test(monkeypatch):
    monkeypatch.setattr(zygote, "_place", lambda cgroup, pid: None)
    assert_caught(check_the_memory_limit_is_the_runs_own)


def test_sabotage_a_kill_that_misses_the_runs_pid_1_is_caught(monkeypatch):
    monkeypatch.setattr(zygote.signal, "pidfd_send_signal", lambda pidfd, sig: None)
    assert_caught(check_a_timed_out_run_is_killed_at_its_wall_time)


def test_sabotage_a_run_that_keeps_its_tmp_is_caught(monkeypatch):
    sabotaged_child(
        monkeypatch, '    _mount(b"tmpfs", b"/tmp"', '    0 and _mount(b"tmpfs", b"/tmp"'
    )
    assert_caught(check_consecutive_runs_share_nothing)


def test_sabotage_a_run_that_may_make_user_namespaces_is_caught(monkeypatch):
    sabotaged_child(
        monkeypatch,
        '    _write("/proc/sys/user/max_user_namespaces", b"0")',
        '    0 and _write("/proc/sys/user/max_user_namespaces", b"0")',
    )
    assert_caught(check_a_run_cannot_make_a_user_namespace)


def test_sabotage_a_template_that_preloads_random_is_caught(monkeypatch):
    sabotaged_child(monkeypatch, '    "typing",\n)', '    "typing",\n    "random",\n)')
    assert_caught(check_preloaded_modules_hold_no_random_state)


def check_the_programs_output_streams_are_a_fresh_interpreters(backend: BwrapBackend) -> None:
    # What `python3 -u` gives a program whose stdout and stderr are pipes (the template makes
    # them once: a stream decides at birth whether its file is seekable).
    code = (
        "import sys\n"
        "for s in (sys.stdout, sys.stderr):\n"
        "    print(s.fileno(), s.seekable(), s.write_through, s.encoding, s.errors)\n"
        "print('to stderr', file=sys.stderr)\n"
    )
    result = run(backend, code)
    assert result.stdout == "1 False True UTF-8 strict\n2 False True UTF-8 backslashreplace\n"
    assert result.stderr == "to stderr\n"


def test_the_programs_output_streams_are_a_fresh_interpreters(backend):
    check_the_programs_output_streams_are_a_fresh_interpreters(backend)


def test_sabotage_output_streams_made_on_the_templates_own_fds_are_caught(monkeypatch):
    sabotaged_child(
        monkeypatch, "_streams_on_a_pipe(driver.output_streams)", "driver.output_streams()"
    )
    assert_caught(check_the_programs_output_streams_are_a_fresh_interpreters)


def test_sabotage_a_template_that_keeps_its_own_environment_is_caught(monkeypatch):
    _template_started_with_a_variable_of_its_own(monkeypatch)
    sabotaged_child(monkeypatch, "    os.environ.clear()\n    os.environ.update(", "    (")
    assert_caught(check_a_run_gets_the_base_environment_not_the_templates)


def test_sabotage_a_driver_that_keeps_the_templates_environment_for_every_job_is_caught(
    monkeypatch,
):
    sabotaged_driver(monkeypatch, "    if env == PRESET_ENV:\n", "    if True:\n")
    assert_caught(check_a_runs_environment_is_its_jobs_alone)


def test_sabotage_an_exit_that_collects_only_the_youngest_generation_is_caught(monkeypatch):
    old = "    if gc.get_objects(generation=1) or gc.get_objects(generation=2):\n"
    sabotaged_driver(monkeypatch, old, "    if False:\n")
    assert_caught(check_cycles_are_finalized_at_exit)


def test_sabotage_an_exit_without_a_collection_is_caught(monkeypatch):
    sabotaged_driver(monkeypatch, "        _collect_the_programs_garbage()\n", "")
    assert_caught(check_cycles_are_finalized_at_exit)


def test_sabotage_preloaded_modules_that_shadow_the_jobs_are_caught(monkeypatch):
    sabotaged_driver(monkeypatch, '    _unshadow_preloaded(job["files"])\n', "")
    assert_caught(test_a_jobs_own_module_wins_over_a_preloaded_one)


def test_nothing_of_the_zygote_outlives_close():
    built = make_backend(CLOSE_UID)
    template = built._zygote._template if built._zygote is not None else None
    assert template is not None
    run(built, "print(1)")
    built.close()
    assert not template.alive()
    assert template.host.cgroup is not None and template.host.cgroup.dirs == {}
    assert processes_of(CLOSE_UID) == []


def test_sabotage_runs_that_share_the_templates_terminals_are_caught(monkeypatch):
    mount = '    _mount(\n        b"devpts"'
    sabotaged_child(monkeypatch, mount, mount.replace("_mount", "0 and _mount"))
    assert_caught(check_concurrent_runs_share_no_terminal)
