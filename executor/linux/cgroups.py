"""Per-sandbox cgroups (v1 memory, pids, cpu) where the host lets us create them.

Each sandbox gets its own group below the cgroup this process already lives in, so the host's
own accounting still covers it: inside a group of its backend's own (`owner_groups`), which the
backend removes when it closes and a later start removes if the process died first
(`remove_stale`). The kernel then enforces resident memory (and tells us about an OOM kill),
the task count and the CPU share; rlimits stay on as a second line.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass, field

from executor.limits import Limits
from executor.linux.kernel_files import read_text, write_text

logger = logging.getLogger(__name__)

ROOT = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "pids", "cpu")
# The in-sandbox supervisor and bwrap need a few pids of their own beyond the program's. Memory
# gets no such allowance: memory_mib is what the whole sandbox may hold, so the program can
# never use more than the limit says (the supervisor's few MiB come out of the same budget).
PIDS_OVERHEAD = 4
CPU_PERIOD_US = 100_000
_counter = itertools.count()


def group_path(controller: str, pid: int | str = "self") -> str | None:
    """A process's group in a v1 hierarchy, from its /proc/PID/cgroup (ours by default)."""
    try:
        with open(f"/proc/{pid}/cgroup") as lines:
            for line in lines:
                _, names, path = line.rstrip("\n").split(":", 2)
                if controller in names.split(","):
                    return path
    except OSError:
        return None
    return None


def available_parents() -> dict[str, str]:
    """controller -> writable parent directory for our per-sandbox groups."""
    parents: dict[str, str] = {}
    for controller in CONTROLLERS:
        own = group_path(controller)
        if own is None:
            continue
        parent = os.path.join(ROOT, controller, own.lstrip("/"))
        if os.path.isfile(os.path.join(parent, "cgroup.procs")) and os.access(parent, os.W_OK):
            parents[controller] = parent
    return parents


MEMORY_PAIR = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")


def memory_limit_order(before: str | None, limit: int) -> tuple[str, str]:
    """The order to write MEMORY_PAIR in. The kernel refuses a memory limit above the
    memory+swap one, so a group kept from a run with a lower limit (cgroup_stock.py) raises
    memory+swap first; lowering, or on fresh groups (both unlimited), memory goes first."""
    if before is not None and int(before) < limit:
        return (MEMORY_PAIR[1], MEMORY_PAIR[0])
    return MEMORY_PAIR


@dataclass
class SandboxCgroup:
    """The groups of one sandbox; `procs_files` are what its launcher writes itself into."""

    dirs: dict[str, str]
    _written: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    @classmethod
    def create(cls, parents: dict[str, str]) -> SandboxCgroup:
        """The groups, empty. The launcher joins them before it drops privileges
        (executor/policy/bwrap_args.launch_argv), so they stay owned by us."""
        name = f"undoable-{os.getpid()}-{next(_counter)}"
        dirs: dict[str, str] = {}
        try:
            for controller, parent in parents.items():
                path = os.path.join(parent, name)
                os.mkdir(path)
                dirs[controller] = path
        except OSError:
            cls(dirs).remove()
            raise
        return cls(dirs)

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(path, "cgroup.procs") for path in self.dirs.values()]

    @property
    def has_memory(self) -> bool:
        return "memory" in self.dirs

    def apply(self, limits: Limits) -> None:
        """Set the limits (also on a warm sandbox just before its job)."""
        if "memory" in self.dirs:
            # No swap either: memory+swap capped at the same figure.
            before = self._written.get(("memory", MEMORY_PAIR[0]))
            for name in memory_limit_order(before, limits.memory_bytes):
                optional = name == "memory.memsw.limit_in_bytes"
                self._write("memory", name, str(limits.memory_bytes), optional=optional)
        if "pids" in self.dirs:
            self._write("pids", "pids.max", str(limits.max_pids + PIDS_OVERHEAD))
        if "cpu" in self.dirs:
            # One CPU's worth of time: a spinner cannot starve the host.
            self._write("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US))
            self._write("cpu", "cpu.cfs_quota_us", str(CPU_PERIOD_US))

    def _write(self, controller: str, name: str, value: str, optional: bool = False) -> None:
        # A pooled sandbox gets the same limits again when a run takes it: skip what is set.
        if self._written.get((controller, name)) == value:
            return
        try:
            write_text(os.path.join(self.dirs[controller], name), value)
        except OSError:
            if not optional:
                raise
            return
        self._written[(controller, name)] = value

    def hand_over(self) -> SandboxCgroup:
        """A new object for the same groups and the limits written to them. This one is left
        with no group, so nothing done through it (a late kill) reaches them any more."""
        taken = SandboxCgroup(dict(self.dirs), dict(self._written))
        self.dirs.clear()
        self._written.clear()
        return taken

    def empty(self) -> bool:
        """No process in the groups (OSError when that cannot be read).

        The pids controller counts them in one small read, where each `cgroup.procs` read
        makes the kernel build and sort a list; a sandbox's processes are in all its groups.
        """
        if "pids" in self.dirs:
            return int(read_text(os.path.join(self.dirs["pids"], "pids.current"))) == 0
        return not any(read_text(procs).strip() for procs in self.procs_files)

    def memory_charged_bytes(self) -> int:
        """Memory charged to the group now, page cache included (0 without a memory group)."""
        if "memory" not in self.dirs:
            return 0
        return int(read_text(os.path.join(self.dirs["memory"], "memory.usage_in_bytes")))

    def oom_killed(self) -> bool:
        """True if the kernel OOM-killed a process of this sandbox."""
        return self._counter("memory", "memory.oom_control", "oom_kill") > 0

    def pids_max_hit(self) -> bool:
        """True if the pids controller refused a fork in this sandbox (pids.events "max")."""
        return self._counter("pids", "pids.events", "max") > 0

    def _counter(self, controller: str, name: str, key: str) -> int:
        """One `key value` line of a cgroup file; 0 when the controller or the line is absent."""
        if controller not in self.dirs:
            return 0
        try:
            text = read_text(os.path.join(self.dirs[controller], name))
        except OSError:
            return 0
        for line in text.splitlines():
            found, _, value = line.partition(" ")
            if found == key:
                return int(value)
        return 0

    def runnable_s(self) -> float:
        """The longest any process of the sandbox has been running or waiting to run.

        From /proc/<pid>/schedstat: time on a CPU plus time on a run queue. A spinner on a
        busy host gets less CPU than it asks for; this is what it asked for.
        """
        longest = 0
        for pid in self.pids():
            try:
                on_cpu_ns, waiting_ns, _ = read_text(f"/proc/{pid}/schedstat").split()
            except (OSError, ValueError):
                continue
            longest = max(longest, int(on_cpu_ns) + int(waiting_ns))
        return longest / 1e9

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            try:
                found.update(int(line) for line in read_text(procs).split())
            except OSError:
                continue
        return found

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue

    def remove(self, timeout_s: float = 5.0) -> bool:
        """Kill what is left and remove the groups; False if one could not be removed."""
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        for controller, path in list(self.dirs.items()):
            while True:
                try:
                    os.rmdir(path)
                    del self.dirs[controller]
                    break
                except FileNotFoundError:
                    del self.dirs[controller]
                    break
                except OSError:
                    # Still busy: processes exiting after the namespace's init died.
                    if time.monotonic() > deadline:
                        logger.warning("cgroup not removed", extra={"cgroup": path})
                        return False
                    self.kill_all()
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        return True


def owner_groups(parents: dict[str, str]) -> dict[str, str]:
    """A group of one owner's own (a backend) under each parent, named like a sandbox's, for
    the groups of its sandboxes: `remove_tree` on each takes down all it made, and what a
    killed server leaves is one tree per controller, found by the next start's `remove_stale`.
    Empty (no group) when they cannot be made: its sandboxes then run without cgroups."""
    try:
        return SandboxCgroup.create(parents).dirs
    except OSError as exc:
        logger.warning("no cgroups of our own", extra={"error": str(exc)})
        return {}


def remove_tree(path: str, timeout_s: float = 5.0) -> bool:
    """Remove the group at `path` and every group below it, deepest first, killing the
    processes still in each (cgroup v1 refuses to remove a group that holds either); False if
    one is left."""
    removed = True
    for folder, _, _ in os.walk(path, topdown=False):
        removed = SandboxCgroup({"tree": folder}).remove(timeout_s) and removed
    return removed


# Our groups' names: a sandbox's or an owner's, and (before owners had groups) a zygote
# template's, each with the pid of the process that made it and a serial number.
STALE_PREFIXES = ("undoable-zygote-", "undoable-")


def _owner_pid(name: str) -> int | None:
    """The pid in one of our groups' names (`<prefix><pid>-<n>`), None for any other name."""
    for prefix in STALE_PREFIXES:
        if name.startswith(prefix):
            owner, _, serial = name.removeprefix(prefix).partition("-")
            return int(owner) if owner.isdigit() and serial.isdigit() else None
    return None


def remove_stale(parents: dict[str, str]) -> None:
    """Remove our groups of owners that no longer exist (a server killed before it could clean
    up): with what is below them, their processes killed. A live process's are never touched
    (a pid taken again keeps them: late, never wrong)."""
    for parent in parents.values():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            owner = _owner_pid(name)
            if owner is None:
                continue
            if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
                continue
            if not remove_tree(os.path.join(parent, name)):
                logger.warning("a stale cgroup stays", extra={"cgroup": name})
