"""The zygote's in-sandbox side: a long-lived template process that starts each stateless run
from an already-initialised interpreter (docs/zygote.md; host side: linux/zygote.py).

The template runs in a bwrap sandbox of its own (read-only root, no network, capabilities
dropped) under a seccomp filter that still lets it unshare and mount. It never runs user code
and never sees a run's job: code, environment and files go from the host straight to the
program on the job pipe. Per request (one SEQPACKET message carrying the run's pipes) it
clones the run's first process straight into fresh user, mount, pid, net, ipc and uts
namespaces (the template kills it at the run's hard deadline). That process, PID 1 of the new
pid namespace, maps its own uid, brings up lo, mounts size-capped tmpfs on /workspace, /tmp
and /dev/shm and a fresh /proc, forbids further user namespaces, asks the host to put it in
the run's cgroups (the kernel tells the host its pid: SCM_CREDENTIALS) and waits for "go";
then unshares a cgroup namespace, starts a new session, drops every capability, sets
no_new_privs, loads the same seccomp BPF every bwrap sandbox runs under, and becomes the
supervisor of executor/policy/supervisor.py.

Like supervisor.py this file is sent as source and never imported by the host.
"""

import ctypes
import os
import select
import socket
import struct
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SIGCHLD = 17
SIGKILL = 9
# clone(2)'s number; its first two arguments (flags, new stack) are the same on both.
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 1
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# The standard modules LLM-written programs import most, imported once here so no run pays for
# them (`import typing` alone is ~8 ms of a fresh interpreter's CPU; docs/zygote.md). None of
# them draws or holds random state: `random`, `tempfile`, `uuid`, `secrets` and OpenSSL
# (`hashlib`, `ssl`) stay out, or every run would start from the template's same generator.
PRELOAD = (
    "bisect",
    "collections",
    "copy",
    "datetime",
    "functools",
    "heapq",
    "itertools",
    "json",
    "math",
    "operator",
    "re",
    "string",
    "typing",
)
# Request: b"run HARD_S TMP_BYTES WORKDIR_BYTES" with these fds, in this order.
FDS = ("stdin", "stdout", "stderr", "job", "status", "place")

_libc = ctypes.CDLL(None, use_errno=True)
# syscall(2) of the same C library, called without releasing the GIL (see _clone_run).
_syscall_holding_gil = ctypes.PyDLL(None, use_errno=True).syscall
_syscall_holding_gil.restype = ctypes.c_long
# clone(2)'s number, flags, and no new stack, parent tid, child tid or tls (see _clone_run).
_syscall_holding_gil.argtypes = (ctypes.c_long, *[ctypes.c_ulong] * 5)


def _typed(name, *argtypes):
    """`name` of the C library with its argument types declared, so a call converts plain
    Python ints and bytes directly. Declared once, in the template: a run's first process
    then makes each call without building an argument object per parameter, which in a
    forked process costs page copies as well as time (docs/zygote.md)."""
    function = getattr(_libc, name)
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_ulong = ctypes.c_ulong
_cstr = ctypes.c_char_p
_c_prctl = _typed("prctl", ctypes.c_int, _ulong, _ulong, _ulong, _ulong)
_c_unshare = _typed("unshare", ctypes.c_int)
_c_mount = _typed("mount", _cstr, _cstr, _cstr, _ulong, _cstr)
_c_capset = _typed("capset", ctypes.c_void_p, ctypes.c_void_p)
_c_sethostname = _typed("sethostname", _cstr, ctypes.c_size_t)
_c_socket = _typed("socket", ctypes.c_int, ctypes.c_int, ctypes.c_int)
_c_ioctl = _typed("ioctl", ctypes.c_int, _ulong, ctypes.c_void_p)


def _failed(what):
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option, arg2=0, arg3=0):
    if _c_prctl(option, arg2, arg3, 0, 0) != 0:
        raise _failed(f"prctl {option}")


def _unshare(flags):
    if _c_unshare(flags) != 0:
        raise _failed("unshare")


def _mount(source, target, fstype, flags, data):
    """mount(2) with every string already bytes (or None)."""
    if _c_mount(source, target, fstype, flags, data) != 0:
        raise _failed(f"mount {target.decode()}")


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _own_id_maps():
    """uid_map and gid_map lines mapping this process's own uid and gid, read before a new user
    namespace leaves them unmapped."""
    uid, gid = os.getuid(), os.getgid()
    return b"%d %d 1" % (uid, uid), b"%d %d 1" % (gid, gid)


def _map_own_ids(id_maps):
    uid_map, gid_map = id_maps
    _write("/proc/self/setgroups", b"deny")
    _write("/proc/self/uid_map", uid_map)
    _write("/proc/self/gid_map", gid_map)


class _InterfaceFlags(ctypes.Structure):
    """struct ifreq as SIOCGIFFLAGS and SIOCSIFFLAGS use it: a name, then the flags."""

    _fields_ = (
        ("name", ctypes.c_char * 16),
        ("flags", ctypes.c_short),
        ("pad", ctypes.c_char * 22),
    )


def _loopback_up(request):
    """`lo` up, through `request` (an _InterfaceFlags naming it, made by the template)."""
    sock = _c_socket(socket.AF_INET, socket.SOCK_DGRAM, 0)
    if sock < 0:
        raise _failed("socket")
    try:
        address = ctypes.addressof(request)
        if _c_ioctl(sock, SIOCGIFFLAGS, address) != 0:
            raise _failed("SIOCGIFFLAGS lo")
        request.flags |= IFF_UP
        if _c_ioctl(sock, SIOCSIFFLAGS, address) != 0:
            raise _failed("SIOCSIFFLAGS lo")
    finally:
        os.close(sock)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _prepared(bpf):
    """What every run needs and the template can build once: the seccomp program (its
    sock_fprog, which runs inherit with the template's memory), the last capability, and the
    arguments of a run's first process's C calls (ids to map, empty capability sets, the
    loopback request), so that it converts or allocates as little as it can."""
    program = ctypes.create_string_buffer(bpf, len(bpf))
    fprog = _SockFprog(len(bpf) // 8, ctypes.addressof(program))
    with open("/proc/sys/kernel/cap_last_cap") as last:
        cap_last = int(last.read())
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two of {effective, permitted, inheritable}, all zero
    return {
        "program": program,
        "fprog": fprog,
        "fprog_address": ctypes.addressof(fprog),
        "cap_last": cap_last,
        "no_capabilities": (ctypes.addressof(header), ctypes.addressof(data)),
        "capset_buffers": (header, data),  # kept alive with their addresses
        "clone": SYS_CLONE[os.uname().machine],
        # A run's first process reads no ids of its own before it has mapped them.
        "id_maps": _own_id_maps(),
        "loopback": _InterfaceFlags(name=b"lo"),
    }


def _drop_capabilities(prepared):
    for cap in range(prepared["cap_last"] + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    if _c_capset(*prepared["no_capabilities"]) != 0:
        raise _failed("capset")


def _seccomp(prepared):
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prepared["fprog_address"])


def _close_fds_except(keep):
    last = 2
    for fd in sorted(keep):
        if fd > last + 1:
            os.closerange(last + 1, fd)
        last = max(last, fd)
    os.closerange(last + 1, 1 << 20)


def _clone_run(number):
    """fork(), with the child in fresh namespaces as PID 1 of a pid namespace of its own.

    Python has no clone(); the raw system call with no new stack returns twice, as fork()
    does, without fork()'s after-fork work in the child. None is needed: the template has one
    thread and holds no lock here, the GIL is held across the call (PyDLL), so the child
    returns holding it like the parent, and the child starts its program with os.fork(),
    which does that work in the program's process.
    """
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    pid = _syscall_holding_gil(number, flags | SIGCHLD, 0, 0, 0, 0)
    if pid < 0:
        raise _failed("clone")
    return pid


def _enter_own_namespaces(prepared, sizes):
    """The run's namespaces, fresh from clone: its uid, hostname, loopback and scratch mounts
    (their sizes and the hostname are the host's policy, policy/sandbox_policy.py)."""
    tmp_bytes, workdir_bytes = sizes
    _map_own_ids(prepared["id_maps"])
    hostname = prepared["hostname"]
    if _c_sethostname(hostname, len(hostname)) != 0:
        raise _failed("sethostname")
    _loopback_up(prepared["loopback"])
    flags = MS_NOSUID | MS_NODEV
    _mount(b"tmpfs", b"/workspace", b"tmpfs", flags, b"size=%d,mode=0700" % workdir_bytes)
    _mount(b"tmpfs", b"/tmp", b"tmpfs", flags, b"size=%d,mode=1777" % tmp_bytes)
    _mount(b"tmpfs", b"/dev/shm", b"tmpfs", flags, prepared["dev_shm"])
    # Terminals of its own (/dev/ptmx links to pts/ptmx): in the template's devpts, a run could
    # open a terminal another run holds open at the same time.
    _mount(
        b"devpts",
        b"/dev/pts",
        b"devpts",
        MS_NOSUID | MS_NOEXEC,
        b"newinstance,ptmxmode=0666,mode=620",
    )
    os.chdir("/")


def _run_init(driver, fds, sizes, prepared, caps):
    """The run's first process, PID 1 of its pid namespace; ends as the run's supervisor."""
    stdin, stdout, stderr, job, status, place = fds
    _prctl(PR_SET_PDEATHSIG, SIGKILL)  # it ends with the template
    _enter_own_namespaces(prepared, sizes)
    _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    # Nothing in the run may create a user namespace (and regain capabilities in it).
    _write("/proc/sys/user/max_user_namespaces", b"0")
    # The host reads our pid from the kernel (SCM_CREDENTIALS), puts us in the run's cgroups,
    # and only then lets us go on: nothing of the run runs outside them.
    os.write(place, b"place")
    if os.read(place, 8) != b"go":
        os._exit(125)
    os.close(place)
    _unshare(CLONE_NEWCGROUP)
    os.setsid()
    for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
        os.dup2(fd, target)
    _close_fds_except({0, 1, 2, job, status})
    _drop_capabilities(prepared)
    _seccomp(prepared)
    _prctl(PR_SET_PDEATHSIG, SIGKILL)
    driver.main(job, status, *caps)
    os._exit(0)


def _complain(stderr_fd, exc):
    try:  # noqa: SIM105 - nothing else to tell anyone
        os.write(stderr_fd, f"sandbox: could not start the program: {exc!r}\n".encode())
    except OSError:  # noqa: S110
        pass


def _parse(message, fds):
    parts = message.split(b" ")
    if len(parts) != 4 or parts[0] != b"run" or len(fds) != len(FDS):
        return None
    try:
        hard_s, tmp_bytes, workdir_bytes = (int(part) for part in parts[1:])
    except ValueError:
        return None
    if min(hard_s, tmp_bytes, workdir_bytes) <= 0:
        return None
    return hard_s, (tmp_bytes, workdir_bytes)


def _received_fds(ancdata):
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += struct.unpack(f"{usable // 4}i", data[:usable])
    return fds


def serve(driver, control_fd, bpf, caps, sandbox):
    """The template's loop: one clone per request, each run killed at its hard deadline.

    Each run's first process is watched through a pidfd, so it is reaped as soon as it ends
    (the kernel has then reaped everything else in its pid namespace) and killed at its
    deadline; its fds are closed before any of the run's code exists. The template keeps its
    copy of the run's placement socket until it has reaped that process: the host's end then
    reads EOF, so the host knows when nothing of the run is left (ZygoteRun.destroy waits for
    it).
    """
    control = socket.socket(fileno=control_fd)
    prepared = _prepared(bpf)
    prepared["hostname"] = sandbox["hostname"]
    prepared["dev_shm"] = b"size=%d,mode=1777" % sandbox["dev_shm_bytes"]
    runs: dict[int, tuple[int, float, int]] = {}  # pidfd -> (pid, deadline, placement fd)
    poller = select.poll()
    poller.register(control, select.POLLIN)
    while True:
        now = time.monotonic()
        for pid, deadline, _ in runs.values():
            if now >= deadline:
                _kill(pid)  # the run's PID 1: its whole pid namespace dies with it
        wait = min([deadline for _, deadline, _ in runs.values()], default=now + 1) - now
        ready = {fd for fd, _ in poller.poll(max(0, min(1000, int(wait * 1000))) + 1)}
        _reap(runs, poller)
        if control.fileno() not in ready:
            continue
        message, ancdata, _, _ = control.recvmsg(256, socket.CMSG_SPACE(4 * len(FDS)))
        fds = _received_fds(ancdata)
        if not message:
            # The host is gone: so are its runs.
            for pid, _, _ in runs.values():
                _kill(pid)
            os._exit(0)
        request = _parse(message, fds)
        if request is None:
            for fd in fds:
                os.close(fd)
            continue
        hard_s, sizes = request
        try:
            pid = _clone_run(prepared["clone"])
        except OSError as exc:  # this run fails (its host sees EOF); the template goes on
            _complain(fds[2], exc)
            for fd in fds:
                os.close(fd)
            continue
        if pid == 0:
            try:
                control.close()
                # Nothing of the template's or of other runs (their pidfds, their placement
                # sockets, which must reach EOF when their own runs end).
                _close_fds_except(set(fds))
                _run_init(driver, fds, sizes, prepared, caps)
            except BaseException as exc:
                _complain(fds[2], exc)
            os._exit(126)
        for fd in fds[:-1]:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        runs[pidfd] = (pid, time.monotonic() + hard_s, fds[-1])
        poller.register(pidfd, select.POLLIN)


def _reap(runs, poller):
    """Reap every child that ended: the runs' first processes (woken by their pidfds) and
    anything else that ends up this process's child (it is PID 1 of its own namespace)."""
    by_pid = {pid: pidfd for pidfd, (pid, _, _) in runs.items()}
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        pidfd = by_pid.pop(pid, None)
        if pidfd is not None:
            place = runs.pop(pidfd)[2]
            poller.unregister(pidfd)
            os.close(pidfd)
            os.close(place)  # the host's end reads EOF: nothing of the run is left


def _kill(pid):
    # Not yet reaped (only the loop above reaps), so the pid is still this run's PID 1.
    try:
        os.kill(pid, SIGKILL)
    except OSError:
        return


def _streams_on_a_pipe(make):
    """`make()` run while fds 1 and 2 are a pipe, as a run's program has them; ours are put
    back after. Nothing is ever written to the streams here."""
    read_end, write_end = os.pipe()
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        return make()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, read_end, write_end):
            os.close(fd)


def _confine_in_container(template_bpf, covered):
    """What bwrap does for a template in a sandbox, for one in a Docker container
    (backends/docker/template.py), before it takes any request.

    A user and mount namespace of its own, where an empty read-only tmpfs covers each folder of
    `covered`: /sys, since the container's sysfs shows the host's devices (and more, with the
    unmasked system paths the runs need to mount their /proc) where a bwrap sandbox has no
    /sys; and the host folder the template's socket was in. Then no capabilities
    and the template's seccomp filter, as bwrap would load it. Runs still start with a full
    set of capabilities in their own user namespaces, and load the full filter themselves.
    """
    id_maps = _own_id_maps()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_own_ids(id_maps)
    flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
    for folder in covered:
        _mount(b"tmpfs", os.fsencode(folder), b"tmpfs", flags, b"size=4k,mode=0555")
    prepared = _prepared(template_bpf)
    _drop_capabilities(prepared)
    _seccomp(prepared)


def start(payload, control_fd):
    """Entry point (the bootstraps in linux/zygote.py and backends/docker/template.py
    hand over the host's payload)."""
    if "template_bpf" in payload:
        _confine_in_container(payload["template_bpf"], payload["template_covers"])
    # Runs inherit the environment the host names, not whatever the template was started with
    # (a container's own variables); a job with exactly this one keeps it as it is
    # (driver._set_environment), so no run pays for making it.
    os.environ.clear()
    os.environ.update(payload["env"])
    driver = type(sys)("undoable_driver")
    exec(compile(payload["driver"], "supervisor.py", "exec"), driver.__dict__)  # noqa: S102
    driver.__dict__["PRESET_ENV"] = payload["env"]
    loaded = set(sys.modules)
    for name in PRELOAD:
        __import__(name)
    # The driver gives a job's own module of the same name precedence over these.
    driver.__dict__["PRELOADED"] = frozenset(sys.modules.keys() - loaded)
    driver.__dict__["STREAMS"] = _streams_on_a_pipe(driver.output_streams)
    sandbox = {key: payload[key] for key in ("hostname", "dev_shm_bytes")}
    serve(driver, control_fd, payload["bpf"], payload["caps"], sandbox)
