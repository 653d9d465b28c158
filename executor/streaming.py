"""Turn a program's raw stdout/stderr bytes into ordered, whole-character output chunks.

Shared by every backend. Usage:

    pump = OutputPump(on_output, max_output_bytes=limits.max_output_bytes)
    if not pump.feed("stdout", data):   # False once the cap is reached: stop the program
        kill()
    ...
    pump.close()                        # flush the decoders at end of output
    pump.stdout, pump.stderr, pump.truncated

Each `feed` that yields text emits one OutputChunk with the next sequence number (0, 1, 2, ...
across both streams, in the order fed). Bytes are decoded as UTF-8 with replacement,
incrementally: a character split across two reads comes out whole in the later chunk.
At most `max_output_bytes` raw bytes (both streams together) are kept; the rest is dropped and
`truncated` is set. Not thread-safe: feed it from one thread.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

from executor.result import OutputChunk, Stream

OutputCallback = Callable[[OutputChunk], None]


class OutputPump:
    def __init__(self, on_output: OutputCallback | None, max_output_bytes: int) -> None:
        self._on_output = on_output
        self._budget = max_output_bytes
        self._seq = 0
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")(errors="replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }
        self._parts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.truncated = False
        self._closed = False

    def feed(self, stream: Stream, data: bytes) -> bool:
        """Take bytes read from `stream`; return False once the output cap has been reached."""
        if self.truncated or self._closed:
            return False
        if len(data) > self._budget:
            data = data[: self._budget]
            self.truncated = True
        self._budget -= len(data)
        self._emit(stream, self._decoders[stream].decode(data, final=self.truncated))
        return not self.truncated

    def close(self) -> None:
        """End of output: a dangling partial character becomes U+FFFD."""
        if self._closed:
            return
        for stream in ("stdout", "stderr"):
            self._emit(stream, self._decoders[stream].decode(b"", final=True))  # type: ignore[arg-type]
        self._closed = True

    def host_line(self, line: str) -> None:
        """A line of the host's own at the end of stderr (why the run failed), after the
        program's output: also once closed and past the cap, which bound the program's."""
        stderr = self._parts["stderr"]
        lead = "\n" if stderr and not stderr[-1].endswith("\n") else ""
        self._emit("stderr", f"{lead}{line}\n")

    def _emit(self, stream: Stream, text: str) -> None:
        if not text:
            return
        self._parts[stream].append(text)
        chunk = OutputChunk(seq=self._seq, stream=stream, text=text)
        self._seq += 1
        if self._on_output is not None:
            self._on_output(chunk)

    @property
    def stdout(self) -> str:
        return "".join(self._parts["stdout"])

    @property
    def stderr(self) -> str:
        return "".join(self._parts["stderr"])

    @property
    def chunks_emitted(self) -> int:
        return self._seq
