"""What a sandboxed program IS allowed to do, and how its results come back, on both backends."""

from __future__ import annotations

import dataclasses
import signal
import threading

import pytest
from exit_finalizers import check_cycles_are_finalized_at_exit
from hostile_kit import TEST_LIMITS, SandboxRunner

from executor.cancel import CancelToken
from executor.result import OutputChunk


def test_allow_hello_world(sandbox: SandboxRunner) -> None:
    result = sandbox.run("print('hello, world')")

    assert (result.exit_code, result.signal, result.stdout, result.stderr) == (
        0,
        None,
        "hello, world\n",
        "",
    )
    assert result.ok


def test_allow_unicode_in_code_output_and_file_names(sandbox: SandboxRunner) -> None:
    result = sandbox.run(
        "print(open('données/ünï.txt', encoding='utf-8').read(), 'héllo wörld ✓ 日本語 🎉')",
        files={"données/ünï.txt": "ça va ✓".encode()},
    )

    assert result.stdout == "ça va ✓ héllo wörld ✓ 日本語 🎉\n"


def test_allow_empty_code(sandbox: SandboxRunner) -> None:
    result = sandbox.run("")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_allow_a_syntax_error_is_reported(sandbox: SandboxRunner) -> None:
    result = sandbox.run("def broken(:\n    pass\n")

    assert result.exit_code == 1
    assert "SyntaxError" in result.stderr


def test_allow_a_traceback_reads_like_python_c_without_the_drivers_frames(
    sandbox: SandboxRunner,
) -> None:
    result = sandbox.run("def f():\n    1 / 0\n\nprint('before')\nf()\n")

    assert (result.exit_code, result.stdout) == (1, "before\n")
    assert result.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 5, in <module>\n'
        '  File "<string>", line 2, in f\n'
        "ZeroDivisionError: division by zero\n"
    )


def test_allow_a_programs_own_excepthook_reports_its_uncaught_exception(
    sandbox: SandboxRunner,
) -> None:
    code = (
        "import sys\n"
        "sys.excepthook = lambda kind, exc, tb: print('hooked', kind.__name__, exc)\n"
        "raise KeyError('k')\n"
    )
    result = sandbox.run(code)

    assert (result.exit_code, result.stdout, result.stderr) == (1, "hooked KeyError 'k'\n", "")


def test_allow_a_traceback_still_prints_with_every_file_descriptor_used(
    sandbox: SandboxRunner,
) -> None:
    code = (
        "import os\n"
        "held = []\n"
        "try:\n"
        "    while True:\n"
        "        held.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError:\n"
        "    pass\n"
        "raise ValueError(f'{len(held)} descriptors held')\n"
    )
    result = sandbox.run(code)

    assert result.exit_code == 1
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert result.stderr.endswith(" descriptors held\n")
    assert "ValueError: " in result.stderr


def test_allow_deep_recursion_fails_cleanly(sandbox: SandboxRunner) -> None:
    result = sandbox.run("def down(n):\n    return down(n + 1)\n\ndown(0)\n")

    assert result.exit_code == 1
    assert "RecursionError" in result.stderr


def test_allow_a_segfault_is_reported_as_a_signal(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import ctypes\nctypes.string_at(0)\n")

    assert (result.exit_code, result.signal) == (None, signal.SIGSEGV)


@pytest.mark.parametrize(
    ("code", "exit_code", "sig"),
    [
        ("import sys; sys.exit(3)", 3, None),
        ("import os; os._exit(137)", 137, None),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", None, signal.SIGKILL),
        ("raise SystemExit(0)", 0, None),
    ],
    ids=["exit-3", "os-exit-137-is-not-a-signal", "sigkill-self", "exit-0"],
)
def test_allow_exit_codes_and_signals_are_reported_apart(
    sandbox: SandboxRunner, code: str, exit_code: int | None, sig: int | None
) -> None:
    result = sandbox.run(code)

    assert (result.exit_code, result.signal, result.timed_out, result.oom_killed) == (
        exit_code,
        sig,
        False,
        False,
    )


def test_allow_stdin(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import sys\nprint(sys.stdin.read().upper(), end='')", stdin=b"hi\nyou\n")

    assert result.stdout == "HI\nYOU\n"


def test_allow_reading_absent_stdin_gets_eof_at_once(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import sys\nprint(repr(sys.stdin.read()))")

    assert (result.stdout, result.timed_out) == ("''\n", False)


def test_allow_stdout_and_stderr_stay_apart(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import sys\nprint('to out')\nprint('to err', file=sys.stderr)")

    assert (result.stdout, result.stderr) == ("to out\n", "to err\n")


def test_allow_binary_output_is_decoded_with_replacement(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import sys\nsys.stdout.buffer.write(bytes(range(256)))")

    assert result.stdout == bytes(range(256)).decode("utf-8", errors="replace")


def test_allow_invalid_utf8_becomes_replacement_characters(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import os\nos.write(1, b'ok \\xff\\xfe end\\n')")

    assert result.stdout == "ok \ufffd\ufffd end\n"


def test_allow_a_character_split_across_writes_comes_out_whole(sandbox: SandboxRunner) -> None:
    # é is c3 a9 and 🎉 is f0 9f 8e 89: each is cut in two, with a pause between the halves.
    code = (
        "import os, time\n"
        "for piece in (b'caf\\xc3', b'\\xa9 \\xf0\\x9f', b'\\x8e\\x89!'):\n"
        "    os.write(1, piece)\n"
        "    time.sleep(0.3)\n"
    )
    chunks: list[OutputChunk] = []

    result = sandbox.run(code, on_output=chunks.append)

    assert result.stdout == "café 🎉!"
    assert [chunk.text for chunk in chunks] == ["caf", "é ", "🎉!"]


def test_allow_output_chunks_are_numbered_in_order_and_tagged(sandbox: SandboxRunner) -> None:
    code = (
        "import sys\n"
        "for i in range(20):\n"
        "    print(f'out {i}', flush=True)\n"
        "    print(f'err {i}', file=sys.stderr, flush=True)\n"
    )
    chunks: list[OutputChunk] = []

    result = sandbox.run(code, on_output=chunks.append)

    assert [chunk.seq for chunk in chunks] == list(range(len(chunks)))
    stdout = "".join(chunk.text for chunk in chunks if chunk.stream == "stdout")
    stderr = "".join(chunk.text for chunk in chunks if chunk.stream == "stderr")
    assert stdout == result.stdout == "".join(f"out {i}\n" for i in range(20))
    assert stderr == result.stderr == "".join(f"err {i}\n" for i in range(20))


def test_allow_partial_output_survives_a_timeout(sandbox: SandboxRunner) -> None:
    limits = dataclasses.replace(TEST_LIMITS, wall_time_s=2)

    result = sandbox.run(
        "import time\nprint('before', flush=True)\ntime.sleep(30)\nprint('after')", limits=limits
    )

    assert (result.timed_out, result.stdout, result.exit_code) == (True, "before\n", None)


def test_allow_cancel_from_another_thread(sandbox: SandboxRunner) -> None:
    token = CancelToken()
    first_line = threading.Event()
    seen: list[str] = []

    def collect(chunk: OutputChunk) -> None:
        # print() writes the text and its newline separately: wait for the whole line.
        seen.append(chunk.text)
        if "".join(seen).endswith("\n"):
            first_line.set()

    def cancel_once_it_printed() -> None:
        first_line.wait(30)
        token.cancel()

    canceller = threading.Thread(target=cancel_once_it_printed)
    canceller.start()

    result = sandbox.run(
        "import time\nprint('started', flush=True)\ntime.sleep(30)\nprint('finished')",
        on_output=collect,
        cancel=token,
    )
    canceller.join()

    assert (result.cancelled, result.timed_out, result.stdout) == (True, False, "started\n")


def test_allow_output_under_the_cap_is_not_truncated(sandbox: SandboxRunner) -> None:
    result = sandbox.run("print('y' * 60_000)")

    assert (result.truncated, len(result.stdout)) == (False, 60_001)


def test_allow_bash(sandbox: SandboxRunner) -> None:
    result = sandbox.run(
        'echo "hi from $0"\nfor i in 1 2 3; do echo $i; done\nexit 4', language="bash"
    )

    assert (result.exit_code, result.stdout.splitlines()[1:]) == (4, ["1", "2", "3"])
    assert result.stdout.startswith("hi from ")


def test_allow_files_placed_in_the_workdir(sandbox: SandboxRunner) -> None:
    code = (
        "n = int(open('data/input.txt').read())\n"
        "open('data/output.txt', 'w').write(str(n * 2))\n"
        "print(open('data/output.txt').read(), open('notes.md').read())\n"
    )

    result = sandbox.run(code, files={"data/input.txt": b"21", "notes.md": b"# hi"})

    assert result.stdout == "42 # hi\n"


def test_allow_interpreter_mode_echoes_bare_expressions(sandbox: SandboxRunner) -> None:
    result = sandbox.run(
        "1 + 1\nx = 5\nx * 2\nprint('done')\n'text'\nNone\n", interpreter_mode=True
    )

    assert result.stdout == "2\n10\ndone\n'text'\n"


def test_allow_environment_from_the_spec(sandbox: SandboxRunner) -> None:
    result = sandbox.run("import os\nprint(os.environ['GREETING'])", env={"GREETING": "hola"})

    assert result.stdout == "hola\n"


def test_allow_a_syntax_error_in_interpreter_mode_reads_as_pythons_own(
    sandbox: SandboxRunner,
) -> None:
    # As `python3 -c` prints it: no traceback, none of the driver's frames.
    expected = (
        "  File \"<string>\", line 2\n    x = (\n        ^\nSyntaxError: '(' was never closed\n"
    )

    for interpreter_mode in (False, True):
        result = sandbox.run("1 + 1\nx = (\n", interpreter_mode=interpreter_mode)
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", expected)


def test_allow_cycles_left_at_exit_are_finalized(sandbox: SandboxRunner) -> None:
    check_cycles_are_finalized_at_exit(sandbox.backend)


def test_allow_zombies_do_not_hold_up_the_run(sandbox: SandboxRunner) -> None:
    code = (
        "import os\n"
        "for _ in range(20):\n"
        "    if os.fork() == 0:\n"
        "        os._exit(0)\n"
        "print('left 20 children unreaped')\n"
    )

    result = sandbox.run(code)

    assert (result.exit_code, result.stdout) == (0, "left 20 children unreaped\n")


def test_allow_loopback_inside_the_sandbox(sandbox: SandboxRunner) -> None:
    code = (
        "import socket, threading\n"
        "server = socket.create_server(('127.0.0.1', 0))\n"
        "def answer():\n"
        "    conn, _ = server.accept()\n"
        "    conn.sendall(conn.recv(4).upper())\n"
        "threading.Thread(target=answer).start()\n"
        "client = socket.create_connection(server.getsockname())\n"
        "client.sendall(b'ping')\n"
        "print(client.recv(4).decode())\n"
    )

    result = sandbox.run(code)

    assert result.stdout == "PING\n"


def test_allow_the_sandbox_python_packages(sandbox: SandboxRunner) -> None:
    code = (
        "import numpy, requests, psycopg2, sqlite3\n"
        "db = sqlite3.connect(':memory:')\n"
        "print(int(numpy.arange(4).sum()), db.execute('select 6 * 7').fetchone()[0])\n"
    )

    # numpy alone takes a while to import on a busy machine: more than the suite's 3 s.
    result = sandbox.run(code, limits=dataclasses.replace(TEST_LIMITS, wall_time_s=15))

    assert result.stdout == "6 42\n"


def test_allow_nothing_carries_over_between_runs(sandbox: SandboxRunner) -> None:
    leave = (
        "import os\n"
        "for path in ('left.txt', '/tmp/left.txt', '/dev/shm/left.txt'):\n"
        "    open(path, 'w').write('from the first run')\n"
        "print('left')\n"
    )
    look = (
        "import os\n"
        "print([os.path.exists(p) for p in ('left.txt', '/tmp/left.txt', '/dev/shm/left.txt')])\n"
    )

    first = sandbox.run(leave)
    second = sandbox.run(look)

    assert (first.stdout, second.stdout) == ("left\n", "[False, False, False]\n")
