"""Where a run's output goes: masked, numbered, capped, stored, then published — in that order.

The store-then-publish order is what makes replay exact: a chunk a websocket client can receive
live is always already in the database, so a client that (re)connects and replays from the
database after its last seq never misses one; duplicates are dropped by seq.
"""

from __future__ import annotations

import threading

from webapp.credentials.masking import SecretMasker
from webapp.runs.models import RunChunk
from webapp.runs.payloads import ChunkPayload, RunOutputEvent
from webapp.runs.publish import publish_run_event


class OutputSink:
    def __init__(self, *, run_id: int, secrets: list[str], cap_bytes: int) -> None:
        self.run_id = run_id
        self.cap_bytes = cap_bytes
        self.bytes_stored = 0
        self.capped = False
        self.last_seq = 0
        self._secrets = secrets
        self._maskers: dict[str, SecretMasker] = {}
        # Backends may deliver stdout and stderr from different threads.
        self._lock = threading.Lock()

    def feed(self, stream: str, text: str) -> None:
        """Take raw program output of one stream (called by the executor's on_output)."""
        with self._lock:
            masker = self._maskers.setdefault(stream, SecretMasker(self._secrets))
            self._emit(stream, masker.feed(text))

    def system(self, text: str) -> None:
        """A line from us, not the program (missing credential, timeout, stop). Never capped."""
        with self._lock:
            self._store_and_publish("system", text)

    def close(self) -> None:
        """The program ended: emit whatever the maskers held back."""
        with self._lock:
            for stream, masker in self._maskers.items():
                self._emit(stream, masker.flush())

    def _emit(self, stream: str, text: str) -> None:
        if not text or self.capped:
            return
        room = self.cap_bytes - self.bytes_stored
        data = text.encode()
        if len(data) > room:
            text = data[:room].decode(errors="ignore")
            self.capped = True
        if text:
            self.bytes_stored += len(text.encode())
            self._store_and_publish(stream, text)

    def _store_and_publish(self, stream: str, text: str) -> None:
        self.last_seq += 1
        RunChunk.objects.create(run_id=self.run_id, seq=self.last_seq, stream=stream, text=text)
        chunk = ChunkPayload(type="chunk", seq=self.last_seq, stream=stream, text=text)
        publish_run_event(self.run_id, RunOutputEvent(type="run.output", chunk=chunk))
