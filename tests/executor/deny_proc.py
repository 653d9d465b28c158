"""Deny cases: the environment, other processes, privileges and dangerous syscalls."""

from __future__ import annotations

from hostile_bait import Bait, sha256
from hostile_kit import MARKER_VAR, Check, DenyCase, inconclusive, no_report, report

from executor.limits import Limits
from executor.result import RunResult

# Raw syscalls by number (no libc wrappers for most of these), with the errno name on failure.
SYSCALLS = """
import ctypes, errno, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    "x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250, "bpf": 321,
               "userfaultfd": 323, "perf_event_open": 298, "setns": 308, "unshare": 272,
               "process_vm_readv": 310},
    "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219, "bpf": 280,
                "userfaultfd": 282, "perf_event_open": 241, "setns": 268, "unshare": 97,
                "process_vm_readv": 270},
}[platform.machine()]

def outcome(rc):
    return "allowed" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

def attempt(name, *args):
    return outcome(libc.syscall(NR[name], *args))
"""

ENVIRON_FILE = """
import hashlib, json, os
def entries(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        return {"error": exc.strerror, "hashes": []}
    return {"error": "", "hashes": [hashlib.sha256(e).hexdigest() for e in raw.split(b"\\0") if e]}
"""


def _check_environ(*, must_see_own_marker: bool = False, must_read: bool = False) -> Check:
    def check(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
        facts = report(result)
        if facts is None:
            return no_report(result)
        seen = set(facts["hashes"])
        problems = []
        leaked = sorted({bait.host_env_hashes[h] for h in seen if h in bait.host_env_hashes})
        if leaked:
            problems.append(f"host environment variables are visible: {leaked}")
        own = sha256(f"{MARKER_VAR}={bait.marker}".encode())
        if must_see_own_marker and own not in seen:
            problems.append(
                inconclusive("the probe did not even see the spec's own variable: it is blind")
            )
        if must_read and facts["error"]:
            problems.append(inconclusive(f"the probe could not read its environ: {facts['error']}"))
        return problems

    return check


ENV_OS_ENVIRON = DenyCase(
    name="reading_a_canary_env_var_via_os_environ",
    program="""
import hashlib, json, os
hashes = [hashlib.sha256(k + b"=" + v).hexdigest() for k, v in os.environb.items()]
print(json.dumps({"hashes": hashes}))
""",
    check=_check_environ(must_see_own_marker=True),
)
ENV_PROC_SELF = DenyCase(
    name="reading_a_canary_env_var_via_proc_self_environ",
    program=ENVIRON_FILE + 'print(json.dumps(entries("/proc/self/environ")))\n',
    # The initial environment of the process: it may predate the spec's variables.
    check=_check_environ(must_read=True),
)
ENV_PROC_1 = DenyCase(
    name="reading_a_canary_env_var_via_proc_1_environ",
    program=ENVIRON_FILE + 'print(json.dumps(entries("/proc/1/environ")))\n',
    check=_check_environ(),
    sabotage_pid_namespace=True,
)
ENV_PARENT = DenyCase(
    name="reading_a_canary_env_var_via_the_parents_environ",
    program=ENVIRON_FILE + 'print(json.dumps(entries(f"/proc/{os.getppid()}/environ")))\n',
    check=_check_environ(),
)


def _check_host_processes(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    if facts["count"] < 1:
        return [inconclusive("the probe saw no process at all, not even itself: it is blind")]
    seen = [bait.host_cmdline_hashes[h] for h in facts["cmdlines"] if h in bait.host_cmdline_hashes]
    return [f"host processes are visible: {seen}"] if seen else []


HOST_PROCESSES = DenyCase(
    name="listing_host_processes",
    program="""
import hashlib, json, os
cmdlines = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdlines.append(hashlib.sha256(f.read()).hexdigest())
    except OSError:
        pass
print(json.dumps({"count": len(cmdlines), "cmdlines": cmdlines}))
""",
    check=_check_host_processes,
)

STATUS = """
def status():
    with open("/proc/self/status") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
"""


def _check_setuid(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    if facts["setuid"]:
        problems.append(f"setuid/setgid executables are reachable: {facts['setuid'][:5]}")
    if facts["no_new_privs"] != "1":
        problems.append("NoNewPrivs is off: a setuid binary would raise privileges")
    return problems


SETUID = DenyCase(
    name="gaining_privileges_through_a_setuid_binary",
    program=STATUS
    + """
import json, os, stat
found = []
for top in ("/usr", "/opt", "/sbin", "/bin"):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in ("share", "include", "src")]
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                found.append(os.path.join(dirpath, name))
print(json.dumps({"setuid": found, "no_new_privs": status()["NoNewPrivs"].strip()}))
""",
    check=_check_setuid,
)


def _check_privileges(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    problems = []
    if 0 in (facts["uid"], facts["euid"]):
        problems.append("the program runs as root")
    for name in ("CapEff", "CapPrm", "CapAmb"):
        if int(facts[name], 16):
            problems.append(f"{name} is {facts[name]}: capabilities were not dropped")
    return problems


PRIVILEGES = DenyCase(
    name="running_as_root_or_with_capabilities",
    program=STATUS
    + """
import json, os
s = status()
caps = {name: s[name].strip() for name in ("CapEff", "CapPrm", "CapAmb")}
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), **caps}))
""",
    check=_check_privileges,
    sabotage_as_root=True,  # the breach is "runs as the host's root"; nothing else shows it
)


def _check_nothing_allowed(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    allowed = sorted(name for name, outcome in facts.items() if outcome == "allowed")
    return [f"these succeeded: {allowed}"] if allowed else []


PTRACE = DenyCase(
    name="ptrace",
    program=SYSCALLS
    + """
import signal, time
secret = ctypes.create_string_buffer(b"ptrace-probe", 16)
child = os.fork()
if child == 0:
    time.sleep(10)
    os._exit(0)
libc.ptrace.restype = ctypes.c_long
rc = libc.ptrace(16, child, None, None)  # PTRACE_ATTACH
facts = {"ptrace_attach": outcome(rc)}
if rc == 0:
    os.waitpid(child, 0)
    libc.ptrace(17, child, None, None)  # PTRACE_DETACH

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

copy = ctypes.create_string_buffer(16)
local, remote = iovec(ctypes.addressof(copy), 16), iovec(ctypes.addressof(secret), 16)
facts["process_vm_readv"] = attempt(
    "process_vm_readv", child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0
)
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
print(json.dumps(facts))
""",
    check=_check_nothing_allowed,
)

MOUNT = DenyCase(
    name="mount",
    program=SYSCALLS
    + """
os.makedirs("mnt", exist_ok=True)
def mount():
    return outcome(libc.mount(b"none", b"mnt", b"tmpfs", 0, None))
facts = {"mount": mount()}
facts["unshare_user_and_mount_ns"] = attempt("unshare", 0x10000000 | 0x00020000)
facts["mount_after_unshare"] = mount()
print(json.dumps(facts))
""",
    check=_check_nothing_allowed,
)

KEYRING = DenyCase(
    name="keyring",
    program=SYSCALLS
    + """
facts = {
    # KEY_SPEC_PROCESS_KEYRING = -2, KEY_SPEC_SESSION_KEYRING = -3, KEYCTL_GET_KEYRING_ID = 0
    "add_key": attempt("add_key", b"user", b"undoable-probe", b"secret", 6, -2),
    "keyctl": attempt("keyctl", 0, -3, 1),
    "request_key": attempt("request_key", b"user", b"undoable-probe", None, 0),
}
print(json.dumps(facts))
""",
    check=_check_nothing_allowed,
)

DANGEROUS_SYSCALLS = DenyCase(
    name="bpf_userfaultfd_perf_setns_and_unshare",
    program=SYSCALLS
    + """
# BPF_MAP_CREATE of a one-entry array map.
bpf_attr = ctypes.create_string_buffer(bytes([2, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0]), 72)
# A software CPU-clock counter on ourselves, user space only (what unprivileged perf allows).
perf_attr = bytearray(64)
perf_attr[0:4] = (1).to_bytes(4, "little")  # PERF_TYPE_SOFTWARE
perf_attr[4:8] = (64).to_bytes(4, "little")  # PERF_ATTR_SIZE_VER0
perf_attr[40:48] = (1 | 1 << 5 | 1 << 6).to_bytes(8, "little")  # disabled, exclude kernel/hv
perf_buf = ctypes.create_string_buffer(bytes(perf_attr), 64)
netns = os.open("/proc/self/ns/net", os.O_RDONLY)
facts = {
    "bpf": attempt("bpf", 0, bpf_attr, 72),
    "userfaultfd": attempt("userfaultfd", 1 | 0o2000000),  # USER_MODE_ONLY | O_CLOEXEC
    "perf_event_open": attempt("perf_event_open", perf_buf, 0, -1, -1, 0),
    "setns": attempt("setns", netns, 0),
    "unshare_user_ns": attempt("unshare", 0x10000000),
}
print(json.dumps(facts))
""",
    check=_check_nothing_allowed,
)


def _check_sentinel(started: str) -> Check:
    def check(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
        problems = []
        if started not in result.stdout:
            problems.append(
                inconclusive(f"the program never printed {started!r}: it did not really run")
            )
        if not bait.sentinel_alive():
            problems.append("the host sentinel process was killed")
        if bait.sigusr1:
            problems.append("the test process on the host received SIGUSR1")
        return problems

    return check


KILL_EVERYTHING = DenyCase(
    name="kill_9_minus_1",
    language="bash",
    program="""
echo "killing everything in reach"
kill -9 -1
echo "still here"
""",
    check=_check_sentinel("killing everything in reach"),
)

SIGNAL_PARENT = DenyCase(
    name="signalling_the_parent_and_the_host",
    program="""
import json, os, signal
targets = {
    "parent": os.getppid(),
    "host test process": int(os.environ["BAIT_HOST_PID"]),
    "host sentinel": int(os.environ["BAIT_SENTINEL_PID"]),
}
print("signalling", flush=True)
facts = {}
for label, pid in targets.items():
    if pid <= 0:  # outside our pid namespace; kill(0) would signal our own group
        facts[label] = "not visible"
        continue
    try:
        os.kill(pid, signal.SIGUSR1)
        facts[label] = "sent"
    except OSError as exc:
        facts[label] = exc.strerror
print(json.dumps(facts))
""",
    check=_check_sentinel("signalling"),
)


def _check_proc_roots(result: RunResult, bait: Bait, limits: Limits) -> list[str]:
    facts = report(result)
    if facts is None:
        return no_report(result)
    leaked = [root for root, seen in facts.items() if bait.canary_text in seen]
    return [f"the host's files are reachable through {leaked}"] if leaked else []


PROC_ROOTS = DenyCase(
    name="reaching_the_host_through_proc_self_root_and_proc_1_root",
    program="""
import json, os
canary = os.environ["BAIT_REPO_CANARY"]
facts = {}
for root in ("/proc/self/root", "/proc/1/root"):
    try:
        with open(root + canary) as f:
            facts[root] = f.read()
    except OSError as exc:
        facts[root] = "error: " + str(exc.strerror)
print(json.dumps(facts))
""",
    check=_check_proc_roots,
)

CASES = [
    ENV_OS_ENVIRON,
    ENV_PROC_SELF,
    ENV_PROC_1,
    ENV_PARENT,
    HOST_PROCESSES,
    SETUID,
    PRIVILEGES,
    PTRACE,
    MOUNT,
    KEYRING,
    DANGEROUS_SYSCALLS,
    KILL_EVERYTHING,
    SIGNAL_PARENT,
    PROC_ROOTS,
]
