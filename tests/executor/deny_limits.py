"""Deny cases: resource exhaustion and escaping the run's lifetime.

Every attack is bounded (e.g. "fork 512 processes", "allocate 512 MiB", "spin 3.5 s") so the
sabotage run on a bare host finishes and leaves the machine alone, yet each bound sits far
past the limit the sandbox must enforce, so the effect is unmistakable.
"""

from __future__ import annotations

from hostile_bait import Bait
from hostile_kit import Check, DenyCase, inconclusive, marked_processes, no_report, report

from executor.limits import Limits
from executor.result import RunResult

MIB = 1024 * 1024


def _timed_out_before(finished: str, started: str) -> Check:
    def check(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
        problems = []
        if started not in result.stdout:
            problems.append(
                inconclusive(f"the program never printed {started!r}: it did not really run")
            )
        if finished in result.stdout:
            problems.append(f"the program got to print {finished!r} past the wall limit")
        if not result.timed_out:
            problems.append("the run is not reported as timed_out")
        return problems

    return check


def _check_fork_bomb(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    if facts["born"] >= limits.max_pids:
        return [f"{facts['born']} processes were born; max_pids is {limits.max_pids}"]
    return []


FORK_BOMB = DenyCase(
    name="fork_bomb",
    program="""
import json, os, time
root = os.getpid()
print("started", flush=True)
r, w = os.pipe()
for _ in range(9):  # up to 2**9 = 512 processes, each one forking too
    try:
        if os.fork() == 0:
            os.write(w, b"+")
    except OSError:
        os.write(w, b"-")
if os.getpid() != root:
    time.sleep(2)  # stay alive so every process counts at once
    os._exit(0)
time.sleep(0.5)
os.set_blocking(r, False)
tally = b""
try:
    while chunk := os.read(r, 65536):
        tally += chunk
except BlockingIOError:
    pass
print(json.dumps({"born": tally.count(b"+"), "refused": tally.count(b"-")}))
""",
    check=_check_fork_bomb,
)


def _check_memory_bomb(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    problems = []
    held = [int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("held")]
    if not held:
        problems.append(
            inconclusive("the program never reported holding memory: it did not really run")
        )
    if held and max(held) > limits.memory_mib:
        problems.append(f"it held {max(held)} MiB; memory_mib is {limits.memory_mib}")
    if "allocated everything" in result.stdout:
        problems.append("it allocated all 512 MiB")
    if not result.oom_killed:
        problems.append("the run is not reported as oom_killed")
    return problems


MEMORY_BOMB = DenyCase(
    name="memory_bomb",
    program="""
hoard = []
for mib in range(16, 513, 16):
    hoard.append(b"\\x01" * (16 << 20))  # written bytes: really resident, not just reserved
    print(f"held {mib} MiB", flush=True)
print("allocated everything")
""",
    check=_check_memory_bomb,
)

CPU_LOOP = DenyCase(
    name="cpu_loop",
    program="""
import time
print("spinning", flush=True)
end = time.monotonic() + 3.5  # past the 2 s wall limit; bounded so a bare-host run ends
while time.monotonic() < end:
    pass
print("finished")
""",
    check=_timed_out_before("finished", "spinning"),
    limits={"wall_time_s": 2},
)

SIGTERM_SPINNER = DenyCase(
    name="sigterm_ignoring_spinner",
    program="""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
end = time.monotonic() + 5
while time.monotonic() < end:
    time.sleep(0.01)
print("survived")
""",
    check=_timed_out_before("survived", "ignoring SIGTERM"),
    limits={"wall_time_s": 2},
)

SLEEP_FOREVER = DenyCase(
    name="sleep_forever",
    program="""
import time
print("going to sleep", flush=True)
time.sleep(4)  # forever, next to the 2 s wall limit; bounded so a bare-host run ends
print("woke up")
""",
    check=_timed_out_before("woke up", "going to sleep"),
    limits={"wall_time_s": 2},
)


def _check_flood(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    problems = []
    kept = len(result.stdout.encode())
    if not result.stdout.startswith("x"):
        problems.append(inconclusive("no flood output at all: the program did not really run"))
    if kept > limits.max_output_bytes:
        problems.append(
            f"{kept} bytes of stdout kept; max_output_bytes is {limits.max_output_bytes}"
        )
    if not result.truncated:
        problems.append("the run is not reported as truncated")
    if "flood done" in result.stderr:
        problems.append("the program was not stopped: it finished its 4 MB flood")
    return problems


FLOOD_LINES = DenyCase(
    name="stdout_flood_with_newlines",
    program="""
import sys
line = "x" * 99 + "\\n"
for _ in range(40_000):  # 4 MB
    sys.stdout.write(line)
sys.stdout.flush()
print("flood done", file=sys.stderr)
""",
    check=_check_flood,
)

FLOOD_NO_NEWLINES = DenyCase(
    name="stdout_flood_without_newlines",
    program="""
import os, sys
block = b"x" * 65536
for _ in range(64):  # 4 MiB, not one newline
    os.write(1, block)
print("flood done", file=sys.stderr)
""",
    check=_check_flood,
)


def _check_count(key: str, limit_name: str) -> Check:
    def check(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
        facts = report(result)
        if facts is None:
            return no_report(result)
        limit = getattr(limits, limit_name)
        if facts[key] >= limit:
            return [f"{facts[key]} {key}; {limit_name} is {limit}"]
        return []

    return check


TEN_THOUSAND_THREADS = DenyCase(
    name="ten_thousand_threads",
    program="""
import json, os, threading
threading.stack_size(256 * 1024)
hold = threading.Event()
started, error = 0, ""
for _ in range(10_000):
    try:
        threading.Thread(target=hold.wait, daemon=True).start()
    except RuntimeError as exc:
        error = str(exc)
        break
    started += 1
print(json.dumps({"threads": started, "error": error}), flush=True)
os._exit(0)  # waking 10k waiting threads just to end them would take seconds
""",
    check=_check_count("threads", "max_pids"),
)

TEN_THOUSAND_FILES = DenyCase(
    name="ten_thousand_open_files",
    program="""
import json
files, error = [], ""
for _ in range(10_000):
    try:
        files.append(open("/dev/null", "rb"))
    except OSError as exc:
        error = exc.strerror
        break
print(json.dumps({"files": len(files), "error": error}))
""",
    check=_check_count("files", "max_open_files"),
)


def _check_disk_fill(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    for where, quota_mib in (("workdir", limits.workdir_quota_mib), ("tmp", limits.tmp_quota_mib)):
        written = facts[where]["bytes"]
        if written > quota_mib * MIB:
            problems.append(
                f"{written // MIB} MiB written to {where}; its quota is {quota_mib} MiB"
            )
    return problems


DISK_FILL = DenyCase(
    name="disk_fill",
    program="""
import json, os, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized file is EFBIG, not death
block = b"x" * (1 << 20)

def fill(directory):
    written = 0
    try:
        os.makedirs(directory, exist_ok=True)
        for i in range(64):  # 64 MiB: far past the quota, bounded for a bare-host run
            fd = os.open(f"{directory}/fill-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                view = memoryview(block)
                while view:
                    n = os.write(fd, view)
                    written += n
                    view = view[n:]
            finally:
                os.close(fd)
    except OSError as exc:
        return {"bytes": written, "error": exc.strerror}
    return {"bytes": written, "error": ""}

print(json.dumps({"workdir": fill("fill"), "tmp": fill(os.environ["BAIT_FILL_DIR"])}))
""",
    check=_check_disk_fill,
)


def _check_daemon(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    problems = []
    if "daemon launched" not in result.stdout:
        problems.append(
            inconclusive("the daemon was never launched: the program did not really run")
        )
    survivors = marked_processes(bait.marker)
    if survivors:
        problems.append(f"processes of the run are still alive on the host: {survivors}")
    return problems


DOUBLE_FORK_DAEMON = DenyCase(
    name="double_fork_daemon",
    program="""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        # The marker in argv (and the environment) lets the host find it if it outlives the run.
        marker = "undoable-daemon-" + os.environ["BAIT_MARKER"]
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", marker])
    os._exit(0)
os.wait()
print("daemon launched", flush=True)
""",
    check=_check_daemon,
)

CASES = [
    FORK_BOMB,
    MEMORY_BOMB,
    CPU_LOOP,
    SIGTERM_SPINNER,
    SLEEP_FOREVER,
    FLOOD_LINES,
    FLOOD_NO_NEWLINES,
    TEN_THOUSAND_THREADS,
    TEN_THOUSAND_FILES,
    DISK_FILL,
    DOUBLE_FORK_DAEMON,
]
