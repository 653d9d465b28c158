"""Checks that a program's exit finalizes what a normal interpreter exit does: objects left in
reference cycles have their `__del__` run. The zygote's driver ends a program without the
interpreter's own shutdown (executor/policy/supervisor.py, `_fast_exit`). test_hostile_allow.py
runs it on every backend, and the zygote tests with the collection weakened (sabotage).

The finalizer is the program's own: a buffered file in a cycle is no witness, since CPython
finalizes a cycle's objects in no set order and the file's buffer may be closed before the
text layer above it flushes (its data is then lost in a bare interpreter too). It holds what it
needs itself: the driver clears the program's globals before it collects (so that a file held
by a global is closed in order), where the interpreter's exit lets the module go with its
cycles, so a `__del__` that looks up a global finds it there and not here."""

from __future__ import annotations

from hostile_kit import TEST_LIMITS

from executor.backends.base import Backend
from executor.spec import RunSpec

# Each holder is a cycle that says its name when finalized. `old` survives a full collection
# first, so it sits in the oldest generation when the program ends.
_CYCLES = """
import gc, os
class Holder:
    def __init__(self, name):
        self.me = self
        self.name = name
    def __del__(self, write=os.write):
        write(1, (self.name + "\\n").encode())
"""
ONLY_YOUNG = _CYCLES + "young = Holder('young')\n"
OLD_AND_YOUNG = _CYCLES + "old = Holder('old')\ngc.collect()\nyoung = Holder('young')\n"


def check_cycles_are_finalized_at_exit(backend: Backend) -> None:
    for code, names in ((ONLY_YOUNG, ["young"]), (OLD_AND_YOUNG, ["old", "young"])):
        result = backend.run(RunSpec(code=code), limits=TEST_LIMITS)
        assert result.exit_code == 0, result.stderr
        assert sorted(result.stdout.splitlines()) == names, code
