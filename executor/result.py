"""What a run produced. Frozen: a result is a record, never updated after the fact."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from executor.images import Image

Stream = Literal["stdout", "stderr"]
# The limit that stopped a run, as the exec JSON contract names it (docs: DESIGN.md).
LimitName = Literal["wall_time", "cpu_time", "memory", "output", "pids", "file_size"]
LIMIT_NAMES: tuple[LimitName, ...] = (
    "wall_time",
    "cpu_time",
    "memory",
    "output",
    "pids",
    "file_size",
)


# The last stderr line of a run whose supervisor ended without the program's wait status (it
# crashed, or something killed it): a failed run, exit_code and signal None.
SUPERVISOR_LOST = (
    "sandbox: the run's supervisor ended without reporting how the program ended; "
    "the run failed and its output may be incomplete"
)


@dataclass(frozen=True)
class OutputChunk:
    seq: int  # 0, 1, 2, ... across both streams, in the order we read them
    stream: Stream
    text: str  # decoded UTF-8 (replacement for invalid bytes); never splits a character


OutputCallback = Callable[[OutputChunk], None]


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None  # None when the program was killed by a signal
    signal: int | None  # the signal that killed it, if any; os._exit(137) is exit_code=137
    stdout: str
    stderr: str
    timed_out: bool  # the wall or the CPU time limit stopped it
    oom_killed: bool
    truncated: bool  # output went past max_output_bytes and the program was stopped
    duration_s: float
    cancelled: bool = False
    # Which limit stopped the run, decided by the host (executor.stops), or None.
    limit: LimitName | None = None
    # Images the run left in its output folder, as the host accepted them (executor/images.py),
    # and one line per image cap that left something out.
    images: tuple[Image, ...] = ()
    image_notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (self.timed_out or self.oom_killed or self.cancelled)

    @property
    def duration_ms(self) -> int:
        return round(self.duration_s * 1000)
