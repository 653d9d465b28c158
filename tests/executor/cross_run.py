"""Checks that one run cannot reach another: through a file left anywhere it could write, or
through a terminal while both run. Each takes a backend; test_hostile_fs.py runs them on every
backend, and the zygote tests with a wall taken down (sabotage)."""

from __future__ import annotations

import dataclasses
import threading

from hostile_kit import TEST_LIMITS

from executor.backends.base import Backend
from executor.result import OutputChunk
from executor.spec import RunSpec

LIMITS = dataclasses.replace(TEST_LIMITS, wall_time_s=15)
LEFT_NAME = "undoable-left-by-an-earlier-run"
# Every folder the program can write in, outside its own /proc and /sys.
_WALK = """
import os
def folders():
    for top in os.listdir('/'):
        if top in ('proc', 'sys'):
            continue
        for root, dirs, _ in os.walk('/' + top):
            yield root
"""
LEAVE = (
    _WALK
    + f"""
left = []
for folder in folders():
    try:
        with open(os.path.join(folder, {LEFT_NAME!r}), 'x') as f:
            f.write('x')
        left.append(folder)
    except OSError:
        pass
print(len(left) > 0, flush=True)
"""
)
FIND = (
    _WALK
    + f"""
print(sorted(f for f in folders() if os.path.exists(os.path.join(f, {LEFT_NAME!r}))))
"""
)
HOLD_A_TERMINAL = """
import os, pty, time
main, other = pty.openpty()
print('holding', os.ttyname(other), flush=True)
time.sleep(4)
"""
LOOK_FOR_TERMINALS = """
import os
print(sorted(name for name in os.listdir('/dev/pts') if name.isdigit()))
"""


def run(backend: Backend, code: str, **kwargs: object) -> str:
    result = backend.run(RunSpec(code=code), limits=LIMITS, **kwargs)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.stderr
    return result.stdout


def check_no_run_finds_a_file_an_earlier_run_left(backend: Backend) -> None:
    assert run(backend, LEAVE) == "True\n"  # its own /workspace and /tmp at least
    assert run(backend, FIND) == "[]\n"


def check_concurrent_runs_share_no_terminal(backend: Backend) -> None:
    holding = threading.Event()
    outcome: list[str] = []

    def on_output(chunk: OutputChunk) -> None:
        if "holding" in chunk.text:
            holding.set()

    holder = threading.Thread(
        target=lambda: outcome.append(run(backend, HOLD_A_TERMINAL, on_output=on_output))
    )
    holder.start()
    try:
        assert holding.wait(15), "the first run never opened its terminal"
        assert run(backend, LOOK_FOR_TERMINALS) == "[]\n"
    finally:
        holder.join()
    assert outcome and outcome[0].startswith("holding /dev/pts/")
