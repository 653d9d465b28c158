"""Docker-specific behaviour of DockerBackend's container per run, against the real engine and
sandbox image (its runs forked from a template container: test_docker_template.py).

The deny/allow suite shared with bwrap is tests/executor/test_hostile*.py; here: the warm pool
(single use, warm start), cleanup, where secrets do (not) show, status reporting, self-check.
A program learns its own container id from its hostname (Docker sets it to the short id).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading

import docker
import pytest

from executor.backends.docker.backend import DockerBackend
from executor.cancel import CancelToken
from executor.errors import BackendUnavailable
from executor.limits import Limits
from executor.result import OutputChunk
from executor.spec import RunSpec
from tests.prerequisites import REPO

pytestmark = pytest.mark.docker

LIMITS = Limits(wall_time_s=5, cpu_time_s=5, memory_mib=128, max_pids=32)
WHOAMI = "import socket; print(socket.gethostname())"


@pytest.fixture(scope="module")
def engine(docker_engine):
    return docker_engine  # this module's short name for it


@pytest.fixture(scope="module")
def backend(engine, docker_missing):
    backend = DockerBackend(warm_pool_size=2, limits=LIMITS, zygote=False)
    try:
        backend.self_check()
    except BackendUnavailable as exc:
        backend.close()
        docker_missing(f"the docker backend is unavailable: {exc}")
    yield backend
    backend.close()


def exists(engine, short_id: str) -> bool:
    return any(c["Id"].startswith(short_id) for c in engine.containers(all=True))


def test_it_runs_python_and_streams_numbered_chunks(backend):
    chunks: list[OutputChunk] = []
    code = "import sys; print('out'); print('err', file=sys.stderr); print('out2')"
    result = backend.run(RunSpec(code=code), limits=LIMITS, on_output=chunks.append)
    assert (result.exit_code, result.signal, result.stdout, result.stderr) == (
        0,
        None,
        "out\nout2\n",
        "err\n",
    )
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert "".join(c.text for c in chunks if c.stream == "stdout") == "out\nout2\n"


def test_a_warm_run_uses_a_container_started_before_it(backend):
    assert backend.wait_warm(timeout=60)
    pooled = backend.warm_container_ids()
    result = backend.run(RunSpec(code=WHOAMI), limits=LIMITS)
    assert any(cid.startswith(result.stdout.strip()) for cid in pooled)


def test_a_container_serves_one_run_and_is_then_removed(backend, engine):
    first = backend.run(RunSpec(code=WHOAMI), limits=LIMITS).stdout.strip()
    second = backend.run(RunSpec(code=WHOAMI), limits=LIMITS).stdout.strip()
    assert first != second
    assert backend.settle(timeout=30)
    assert not exists(engine, first)
    assert not exists(engine, second)


def test_with_remove_sync_the_container_is_gone_when_run_returns(engine):
    strict = DockerBackend(warm_pool_size=0, limits=LIMITS, remove_sync=True, zygote=False)
    try:
        used = strict.run(RunSpec(code=WHOAMI), limits=LIMITS).stdout.strip()
        assert not exists(engine, used)
    finally:
        strict.close()


def test_nothing_survives_from_one_run_to_the_next(backend):
    plant = "open('/workspace/planted', 'w').write('x'); open('/tmp/planted', 'w').write('x')"
    backend.run(RunSpec(code=plant), limits=LIMITS)
    look = "import os; print(sorted(os.listdir('/workspace')), sorted(os.listdir('/tmp')))"
    assert backend.run(RunSpec(code=look), limits=LIMITS).stdout == "[] []\n"


def test_run_secrets_never_show_in_docker_inspect(backend, engine):
    seen = {"out": ""}

    def inspect_while_running(chunk: OutputChunk) -> None:
        seen["out"] += chunk.text  # print() may arrive as "id" then "\n"
        if seen["out"].endswith("\n") and "attrs" not in seen:
            seen["attrs"] = json.dumps(engine.inspect_container(seen["out"].strip()))

    # The program outlives the inspection (on a busy machine the callback may run late).
    code = WHOAMI + "; import os, time; assert os.environ['API_TOKEN'] == 'tok-5e1c9'"
    code += "; time.sleep(2)"
    result = backend.run(
        RunSpec(code=code, env={"API_TOKEN": "tok-5e1c9"}),
        limits=LIMITS,
        on_output=inspect_while_running,
    )
    assert result.exit_code == 0
    assert '"Running": true' in seen["attrs"]
    assert "tok-5e1c9" not in seen["attrs"]


def test_files_stdin_and_environment_reach_the_program(backend):
    code = "import os; print(open('data/in.txt').read(), input(), os.environ['GREETING'])"
    spec = RunSpec(
        code=code, files={"data/in.txt": b"file"}, stdin=b"line\n", env={"GREETING": "hi"}
    )
    assert backend.run(spec, limits=LIMITS).stdout == "file line hi\n"


def test_an_exit_code_of_137_is_not_a_sigkill(backend):
    exited = backend.run(RunSpec(code="import os; os._exit(137)"), limits=LIMITS)
    killed = backend.run(RunSpec(code="import os; os.kill(os.getpid(), 9)"), limits=LIMITS)
    assert (exited.exit_code, exited.signal) == (137, None)
    assert (killed.exit_code, killed.signal) == (None, 9)
    assert not killed.oom_killed


def test_signals_and_kill_minus_one_cannot_silence_the_supervisor(backend):
    code = (
        "import os, signal, time\n"
        "if os.fork() == 0:\n    time.sleep(60)\n"  # so that kill(-1) has someone to hit
        "for sig in (2, 15, 19, 1, 17, 9):\n    os.kill(os.getppid(), sig)\n"
        "os.kill(-1, signal.SIGKILL)\nprint('still here')\n"
    )
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    assert (result.exit_code, result.stdout) == (0, "still here\n")


def test_a_memory_bomb_is_reported_as_oom_killed(backend):
    code = "blocks = []\nwhile True: blocks.append(bytearray(8 * 1024 * 1024))"
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    assert result.oom_killed
    assert result.signal == 9


def test_the_wall_limit_keeps_partial_output(backend):
    code = "print('started', flush=True)\nwhile True: pass"
    result = backend.run(RunSpec(code=code), limits=LIMITS.narrowed(wall_time_s=1))
    assert result.timed_out
    assert result.stdout == "started\n"


def test_a_run_can_be_cancelled_from_another_thread(backend):
    token = CancelToken()

    def cancel_on_first_output(chunk: OutputChunk) -> None:
        threading.Thread(target=token.cancel).start()

    code = "import time\nprint('go', flush=True)\nwhile True: time.sleep(1)"
    result = backend.run(
        RunSpec(code=code), limits=LIMITS, on_output=cancel_on_first_output, cancel=token
    )
    assert result.cancelled
    assert result.signal == 9
    assert not result.timed_out


def test_a_double_forked_daemon_does_not_hold_the_run_open(backend, engine):
    code = (
        "import os, socket, time\nprint(socket.gethostname(), flush=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(600)\n"
        "    os._exit(0)\nos.wait()\n"
    )
    result = backend.run(RunSpec(code=code), limits=LIMITS.narrowed(wall_time_s=3))
    assert (result.exit_code, result.timed_out) == (0, False)
    assert backend.settle(timeout=30)
    assert not exists(engine, result.stdout.strip())


def test_a_run_with_other_creation_limits_gets_a_container_of_its_own(backend):
    code = "print(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip())"
    result = backend.run(RunSpec(code=code), limits=LIMITS.narrowed(memory_mib=64))
    assert result.stdout == f"{64 * 1024 * 1024}\n"


def test_close_removes_every_container_of_the_backend(engine):
    other = DockerBackend(warm_pool_size=2, limits=LIMITS, zygote=False)
    other.run(RunSpec(code="pass"), limits=LIMITS)
    assert other.wait_warm(timeout=60)
    other.close()
    label = f"undoable.backend={other.instance_id}"
    assert engine.containers(all=True, filters={"label": label}) == []


def test_self_check_names_the_missing_image(engine):
    with pytest.raises(BackendUnavailable, match="make sandbox-image"):
        DockerBackend(image="undoable-no-such-image:latest", warm_pool_size=0).self_check()


def test_self_check_fails_closed_when_the_engine_is_unreachable(tmp_path):
    url = f"unix://{tmp_path}/no-docker.sock"
    with pytest.raises(BackendUnavailable, match="unreachable"):
        DockerBackend(docker_url=url, warm_pool_size=0).self_check()


def test_our_seccomp_filter_is_stacked_on_dockers_default_profile(backend):
    code = (
        "import ctypes, os\nstatus = open('/proc/self/status').read()\n"
        "print(status.split('Seccomp_filters:')[1].split()[0])\n"
        "libc = ctypes.CDLL(None, use_errno=True)\nchild = os.fork()\n"
        "if child == 0:\n    os.pause()\n"
        "print(libc.ptrace(16, child, None, None), ctypes.get_errno())\n"
    )
    result = backend.run(RunSpec(code=code), limits=LIMITS)
    assert result.stdout == "2\n-1 1\n"  # two filters; PTRACE_ATTACH fails with EPERM


ORPHAN_SCRIPT = """
import json, sys
from executor.backends.docker.backend import DockerBackend
from executor.limits import Limits
from executor.spec import RunSpec
limits = Limits(wall_time_s=2, cpu_time_s=2, memory_mib=128, max_pids=32)
backend = DockerBackend(warm_pool_size=1, limits=limits, zygote=False)
assert backend.wait_warm(timeout=60)
print(json.dumps(backend.warm_container_ids()), flush=True)
code = "import socket, time; print(socket.gethostname(), flush=True); time.sleep(3600)"
echo = lambda chunk: print(chunk.text, end="", flush=True)
backend.run(RunSpec(code=code), limits=limits, on_output=echo)
"""


def test_containers_end_and_vanish_when_the_host_process_dies(engine):
    child = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert child.stdout is not None
    pooled = json.loads(child.stdout.readline())
    running = child.stdout.readline().strip()
    child.kill()  # SIGKILL: no finally, no close(); only the engine side can clean up
    child.wait()
    for container_id in [*pooled, running]:
        with contextlib.suppress(docker.errors.APIError):  # gone, or already being removed
            engine.wait(container_id, condition="removed", timeout=30)
        assert not exists(engine, container_id)


def test_a_long_python_program_runs_and_a_closed_backend_refuses(engine):
    code = "x = 0\n" + "x += 1\n" * 40_000 + "print(x)\n"  # ~280 KB: more than one argv string
    short_lived = DockerBackend(warm_pool_size=0, limits=LIMITS, zygote=False)
    assert short_lived.run(RunSpec(code=code), limits=LIMITS).stdout == "40000\n"
    short_lived.close()
    with pytest.raises(BackendUnavailable):
        short_lived.run(RunSpec(code="pass"), limits=LIMITS)
