"""The host's processes of one uid: what leak checks look for after a sandbox is gone."""

from __future__ import annotations

import os


def processes_of(uid: int) -> list[int]:
    """Pids of the processes `uid` owns now (one that ends meanwhile is left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    found.append(int(entry))
            except FileNotFoundError:
                continue
    return found
