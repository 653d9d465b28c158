"""Emptied per-run cgroups, kept for the next zygote runs instead of removed and made again.

A run's groups cost the machine ~1 ms of CPU when each run has fresh ones: the mkdir of three
groups, and their rmdir once the run has charged them, when the kernel takes down the state of
every controller. That is about an eighth of a warm run (docs/benchmarks.md, "Cgroups kept for
the next run"). A used group is kept only when nothing of its run is in it or shows through it:

- no process. The host gives a group back once the template has reaped the run's first process,
  so the kernel has already ended everything in the run's pid namespace; a group that still
  holds a process is killed and removed.
- no counter that names a limit: no OOM kill, no fork refused at pids.max. The host reads these
  after a run to name what stopped it, so a kept group must not carry them to the next run.
- at most KEEP_MAX_CHARGED_BYTES of memory still charged to it (mostly page cache the run read
  in, which the kernel reclaims under the next run's limit first).

The groups are the host's: a run never sees them (no cgroupfs in its root, a cgroup namespace of
its own), the host writes every limit before a run starts, and one that failed any check above
is removed as before.
"""

from __future__ import annotations

import contextlib
import threading

from executor.linux.cgroups import SandboxCgroup

# Enough for the groups given back between two refills at the API's concurrency; each kept
# group holds a little kernel memory.
STOCK_SIZE = 16
# A print(1+1) run leaves 0.1-0.5 MiB charged; one that read files in leaves their page cache.
KEEP_MAX_CHARGED_BYTES = 2 * 1024 * 1024


class CgroupStock:
    """Hands out per-run groups (`take`) and keeps used ones that are clean (`give_back`)."""

    def __init__(self, parents: dict[str, str], size: int = STOCK_SIZE) -> None:
        self._parents = parents
        self._size = size
        self._kept: list[SandboxCgroup] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> SandboxCgroup:
        """A kept group, or new ones (OSError when they cannot be made)."""
        with self._lock:
            if self._kept:
                return self._kept.pop()
        return SandboxCgroup.create(self._parents)

    def give_back(self, cgroup: SandboxCgroup) -> None:
        """Keep `cgroup` for a later run if it is clean, else remove it. Either way the caller's
        object no longer reaches the groups: a late kill through it cannot hit the next run."""
        groups = cgroup.hand_over()
        keep = self._clean(groups)
        with self._lock:
            if keep and not self._closed and len(self._kept) < self._size:
                self._kept.append(groups)
                return
        groups.remove()

    def close(self) -> None:
        """Remove the kept groups; groups given back from now on are removed."""
        with self._lock:
            self._closed = True
            kept, self._kept = self._kept, []
        for groups in kept:
            groups.remove()

    def __len__(self) -> int:
        return len(self._kept)

    def kept_dirs(self) -> set[str]:
        """The folders of the groups kept now (for leak checks)."""
        with self._lock:
            return {path for group in self._kept for path in group.dirs.values()}

    @staticmethod
    def _clean(groups: SandboxCgroup) -> bool:
        with contextlib.suppress(OSError):
            return (
                groups.empty()
                and not groups.oom_killed()
                and not groups.pids_max_hit()
                and groups.memory_charged_bytes() <= KEEP_MAX_CHARGED_BYTES
            )
        return False
