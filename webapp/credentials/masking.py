"""Replace credential values by `****` in output that arrives in pieces.

A secret may be split across chunks ("xoxb-12" + "34"), so the masker holds back the shortest
tail that could still become a secret; nothing else is delayed. Every character covered by any
occurrence of any value is masked: overlapping occurrences ("abc" and "bcd" in "abcd") merge into
one `****`, so no piece of either leaks. Feeding text in any split gives exactly the output of
masking it whole.
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "****"


class SecretMasker:
    """Stateful masker for one output stream; use one instance per stream."""

    def __init__(self, values: Iterable[str]) -> None:
        # Longest first, so when several values start at one place the widest cover is found first.
        self._secrets = sorted({v for v in values if v}, key=len, reverse=True)
        self._max_len = len(self._secrets[0]) if self._secrets else 0
        self._held = ""
        # Characters at the start of _held already known to be inside a secret whose `****` was
        # already emitted (an overlap chain crossing the hold-back point).
        self._covered = 0

    def feed(self, text: str) -> str:
        """Return the part of everything fed so far that is safe and final to emit."""
        if not self._secrets:
            return text
        return self._process(self._held + text, final=False)

    def flush(self) -> str:
        """Return whatever is still held back (the stream ended); the masker is then empty."""
        if not self._secrets:
            return ""
        return self._process(self._held, final=True)

    def _process(self, buffer: str, *, final: bool) -> str:
        cut = len(buffer) if final else self._hold_point(buffer)
        if cut == 0:
            self._held = buffer
            return ""
        out: list[str] = []
        pos = 0
        covered = 0
        for start, end in self._runs(buffer):
            if start >= cut:
                break
            out.append(buffer[pos:start])
            if not (start == 0 and self._covered):
                out.append(MASK)
            if end > cut:
                # The run continues into the held tail: remember it is already masked.
                covered = end - cut
                pos = cut
                break
            pos = end
        out.append(buffer[pos:cut])
        self._held = buffer[cut:]
        self._covered = covered
        return "".join(out)

    def _hold_point(self, buffer: str) -> int:
        """Index of the earliest tail of `buffer` that is a proper prefix of some secret."""
        for start in range(max(0, len(buffer) - self._max_len + 1), len(buffer)):
            tail = buffer[start:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in self._secrets):
                return start
        return len(buffer)

    def _runs(self, buffer: str) -> list[tuple[int, int]]:
        """Maximal runs of characters covered by some occurrence (overlaps merge, touching not)."""
        spans = [(0, self._covered)] if self._covered else []
        for secret in self._secrets:
            at = buffer.find(secret)
            while at != -1:
                spans.append((at, at + len(secret)))
                at = buffer.find(secret, at + 1)
        spans.sort()
        runs: list[tuple[int, int]] = []
        for start, end in spans:
            if runs and start < runs[-1][1]:
                runs[-1] = (runs[-1][0], max(runs[-1][1], end))
            else:
                runs.append((start, end))
        return runs


def mask_text(text: str, values: Iterable[str]) -> str:
    """Mask a complete text in one go (error messages, stored summaries)."""
    masker = SecretMasker(values)
    return masker.feed(text) + masker.flush()
