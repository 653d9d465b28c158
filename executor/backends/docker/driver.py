"""The supervisor that runs as PID 1 inside every Docker sandbox (stdlib only, Python 3.11).

The container's transport layer around the one in-sandbox supervisor (executor/policy/
supervisor.py): Docker gives a container one stdin and one multiplexed stdout/stderr, and no
launcher of ours holds its wall limit, so this PID 1 does. Its source is passed to the container
as `python3 -I -S -c <this file> <seccomp BPF, base64> <supervisor source>`, so the image needs
nothing of ours. Before it reports ready it starts the program's process: the supervisor's
program role under `python3 -u` (under the stacked seccomp filter, as the sandbox user's
environment) that waits for its job on fd 3, so a run does not pay for an interpreter start.
Then it waits for exactly one run message on stdin (a b"j" frame of executor/policy/wire.py,
JSON), writes the files, hands the job to the program's process (a b"j" frame, marshal), copies
its stdout/stderr to our stdout as frames (1-byte kind, 4-byte length, payload), proposes the
output folder's entries once every process of the run is dead (the host decides what of them is
shown, executor/images.py) and ends with one status frame.

Why PID 1 and not docker-init: the init of a PID namespace ignores signals from inside it that
it has no handler for, and `kill(-1)` skips it, so a hostile program (`kill -9 -1`, `kill -9 1`)
cannot take the reporter down with it; as init it also reaps orphans and daemons. It installs no
handler at all: Python's SIGINT one is replaced by "ignore", and it learns that a child ended
from a signalfd with SIGCHLD blocked (a spoofed SIGCHLD costs it one look for children to reap).
It makes itself non-dumpable so the same-uid program cannot ptrace it or read its /proc entries.
It enforces the wall limit itself, so the limit holds even if the host process dies.

Session mode (a third argument, JSON): the program's process is the one in-sandbox supervisor
(executor/policy/supervisor.py, its source in the session's JSON) serving cells on fds 3 and 4
instead; after the ready frame this supervisor relays the host's stdin to fd 3 and fd 4 to its
stdout, byte for byte (wire.py's frames, checked by the host), and ends the container when the
host's socket closes (also mid-cell: a SIGKILLed server leaves nothing behind), when the cells'
supervisor ends, or at the session's lifetime. Its last words, on its stderr where no cell can
write, are the stop facts (OOM kill, pids cap hit).
"""

import base64
import contextlib
import ctypes
import fcntl
import json
import marshal
import os
import selectors
import signal
import struct
import sys
import time

IDLE_EXIT_S = 3600  # a pooled container nobody claims goes away on its own
WORKDIR = "/workspace"
OUTPUT = "/workspace/output"  # executor/images.py: the host decides what of it is shown
# The sandbox policy's base environment (executor/policy/sandbox_policy.py), for runs and
# sessions: this file runs in the container and imports nothing of ours (a test compares them).
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    # matplotlib draws off-screen, and its font cache goes where it may write (/ is read-only).
    "MPLBACKEND": "Agg",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "UNDOABLE_OUTPUT_DIR": OUTPUT,
}
READ_SIZE = 65536
IMAGE_CHUNK = 256 * 1024  # image bytes per frame: frames are capped at 1 MiB (wire.py)
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SFD_NONBLOCK = 0o4000
SFD_CLOEXEC = 0o2000000

# The program's process is the one in-sandbox supervisor's (executor/policy/supervisor.py, its
# source the second argument): `python3 -u -c SUPERVISOR 3 4` says it is up on fd 4, reads its
# job (a b"j" frame, marshal) on fd 3, then becomes the program, as in a bwrap sandbox.
PROGRAM_JOB_FD, PROGRAM_READY_FD = 3, 4
READY_FRAME = b"r" + bytes(4)


def emit(kind, payload):
    view = memoryview(kind + struct.pack(">I", len(payload)) + payload)
    while view:
        view = view[os.write(1, view) :]


def read_message():
    ready = selectors.DefaultSelector()
    ready.register(0, selectors.EVENT_READ)
    if not ready.select(IDLE_EXIT_S):
        sys.exit(0)
    kind, size = struct.unpack(">cI", read_exact(5))
    if kind != b"j":
        sys.exit(f"sandbox: expected a job frame, got {kind!r}")
    return json.loads(read_exact(size))


def read_exact(size):
    buf = bytearray()
    while len(buf) < size:
        chunk = os.read(0, size - len(buf))
        if not chunk:  # the host went away before sending a run: nothing to do
            sys.exit(0)
        buf += chunk
    return bytes(buf)


def oom_kills():
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            continue
    return 0


def pids_max_hit():
    for path in ("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("max "):
                        return int(line.split()[1]) > 0
        except OSError:
            continue
    return False


def runnable_s():
    """The longest any process here has been on a CPU or waiting for one (schedstat)."""
    longest = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/schedstat") as f:
                on_cpu, waiting, _ = f.read().split()
        except (OSError, ValueError):
            continue
        longest = max(longest, int(on_cpu) + int(waiting))
    return longest / 1e9


def write_files(files):
    for name, data in files.items():
        path = os.path.join(WORKDIR, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))


def child_exits_fd():
    """A descriptor that turns readable when a child of ours ends (read it to clear it).

    SIGCHLD is blocked and read from a signalfd: a handler would do as well, but any handler
    lets the program signal PID 1, where with none the kernel drops what it sends. The signal
    mask is inherited: become_program unblocks it for the program.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    mask = (ctypes.c_ulong * 16)(1 << (signal.SIGCHLD - 1))  # a sigset_t holding SIGCHLD
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.signalfd(-1, mask, SFD_NONBLOCK | SFD_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "signalfd")
    return fd


class Program:
    """The program's process (the supervisor's program role), started before the job exists."""

    def __init__(self, seccomp_bpf, supervisor):
        stdin_r, self.stdin_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        job_r, self.job_w = os.pipe()
        up_r, up_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            child_fds = ((0, stdin_r), (1, out_w), (2, err_w), (3, job_r), (4, up_w))
            argv = ("python3", "-u", "-c", supervisor, str(PROGRAM_JOB_FD), str(PROGRAM_READY_FD))
            become_program(seccomp_bpf, child_fds, argv)
        for fd in (stdin_r, out_w, err_w, job_r, up_w):
            os.close(fd)
        up = read_up_to(up_r, len(READY_FRAME))
        os.close(up_r)
        if up != READY_FRAME:
            sys.exit("sandbox: the program's interpreter did not start")

    def send_job(self, msg):
        cpu = max(1, int(msg["cpu_time_s"] + 0.999))
        limits = {
            "RLIMIT_CPU": cpu,
            "RLIMIT_FSIZE": msg["max_file_size_bytes"],
            "RLIMIT_NOFILE": msg["max_open_files"],
            "RLIMIT_CORE": 0,
        }
        job = {
            "language": msg["language"],
            "code": msg["code"],
            "interpreter_mode": msg["interpreter_mode"],
            "env": dict(BASE_ENV, **msg["env"]),
            "files": {},  # written by this supervisor already
            # The soft CPU limit sends SIGXCPU; the hard one, a second later, SIGKILL.
            "rlimits": {name: (n, n + (name == "RLIMIT_CPU")) for name, n in limits.items()},
        }
        # marshal, as a bwrap sandbox's host sends it: the same interpreter reads it.
        body = marshal.dumps(job)
        # If it died already, its status will say so.
        with contextlib.suppress(BrokenPipeError), os.fdopen(self.job_w, "wb") as pipe:
            pipe.write(b"j" + struct.pack(">I", len(body)) + body)


def become_program(seccomp_bpf, child_fds, argv, env=BASE_ENV):
    err = child_fds[2][1]
    try:  # never returns to the supervisor's code
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # our own /proc files again
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # the memory bomb, not the supervisor, is what the OOM killer takes
        # Lift every source above the targets first, so no dup2 overwrites a later source.
        lifted = [(target, fcntl.fcntl(fd, fcntl.F_DUPFD, 16)) for target, fd in child_fds]
        for target, fd in lifted:
            os.dup2(fd, target)
        err = 2
        os.closerange(5, 65536)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.chdir(WORKDIR)
        install_seccomp(seccomp_bpf)
        os.execve("/usr/bin/python3", list(argv), env)  # noqa: S606
    except BaseException as exc:  # noqa: BLE001 - report why exec failed, then die
        os.write(err, f"sandbox: cannot start the program: {exc}\n".encode())
    os._exit(127)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(program):
    """Stack our deny list (executor/policy/seccomp.py) on top of Docker's default profile.

    Docker's profile still lets a program ptrace its own children, among others; the stacked
    filter refuses what the bwrap backend refuses. no_new_privs is already set by Docker.
    """
    if not program or len(program) % 8:
        raise RuntimeError("no seccomp program to install")
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")


class Run:
    def __init__(self, msg, program):
        self.msg = msg
        self.program = program
        self.sel = selectors.DefaultSelector()
        self.main_pid = None
        self.main_status = None
        self.main_rusage = None
        self.output_left = msg["max_output_bytes"]
        self.truncated = False
        self.timed_out = False
        self.runnable_s = None
        self.stdin_left = b""

    def reap(self):
        while True:
            try:
                pid, status, rusage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.main_pid:
                self.main_status, self.main_rusage = status, rusage

    def forward(self, kind, data):
        if len(data) > self.output_left:
            data = data[: self.output_left]
            self.truncated = True
        self.output_left -= len(data)
        if data:
            emit(kind, data)

    def pump(self, key):
        fd, kind = key.fd, key.data
        if kind == b"i":
            try:
                sent = os.write(fd, self.stdin_left[:READ_SIZE])
            except OSError:  # the program closed its stdin
                sent = len(self.stdin_left)
            self.stdin_left = self.stdin_left[sent:]
            if not self.stdin_left:
                self.sel.unregister(fd)
                os.close(fd)
            return
        data = os.read(fd, READ_SIZE)
        if kind == b"w":
            self.reap()
        elif data:
            self.forward(kind, data)
        else:
            self.sel.unregister(fd)
            os.close(fd)

    def execute(self):
        wake_r = child_exits_fd()
        program = self.program
        stdin_w, out_r, err_r = program.stdin_w, program.out_r, program.err_r
        oom_before = oom_kills()
        started = time.monotonic()
        self.main_pid = program.pid
        program.send_job(self.msg)
        self.stdin_left = base64.b64decode(self.msg["stdin"])
        if self.stdin_left:
            os.set_blocking(stdin_w, False)
            self.sel.register(stdin_w, selectors.EVENT_WRITE, b"i")
        else:
            os.close(stdin_w)
        self.sel.register(out_r, selectors.EVENT_READ, b"o")
        self.sel.register(err_r, selectors.EVENT_READ, b"e")
        self.sel.register(wake_r, selectors.EVENT_READ, b"w")
        deadline = started + self.msg["wall_time_s"]
        while self.main_status is None and not self.truncated:
            left = deadline - time.monotonic()
            if left <= 0:
                self.timed_out = True
                self.runnable_s = runnable_s()  # before the kill: what the program asked for
                break
            for key, _ in self.sel.select(left):
                self.pump(key)
            self.reap()
        duration = time.monotonic() - started
        kill_all()  # the run ends with the main program: daemons and stragglers go too
        for key in list(self.sel.get_map().values()):
            if key.data in (b"o", b"e"):
                os.set_blocking(key.fd, True)
                while not self.truncated and (data := os.read(key.fd, READ_SIZE)):
                    self.forward(key.data, data)
        reap_all(self)
        # Every process of the run is dead: the folder holds what the program left.
        with contextlib.suppress(OSError):  # its images are optional; its status is not
            send_images(self.msg["max_images"], self.msg["max_image_bytes"])
        self.report(duration, oom_kills() > oom_before)

    def report(self, duration, oom):
        status = self.main_status
        exit_code = sig = None
        if status is not None and os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        elif status is not None:
            exit_code = os.WEXITSTATUS(status)
        cpu_s = None
        if self.main_rusage is not None:
            cpu_s = self.main_rusage.ru_utime + self.main_rusage.ru_stime
        # Facts only: the host names the limit from them (executor/stops.py).
        result = {
            "exit_code": exit_code,
            "signal": sig,
            "timed_out": self.timed_out,
            # Any OOM kill in the container counts: under bash it may hit a grandchild.
            "oom_killed": oom,
            "truncated": self.truncated,
            "duration_s": duration,
            "cpu_s": cpu_s,
            "runnable_s": self.runnable_s,
            "pids_max_hit": pids_max_hit(),
        }
        emit(b"s", json.dumps(result).encode())


def send_images(max_count, max_bytes):
    """Propose the output folder's first entries to the host, which decides (executor/images.py).

    Per entry: an b"i" frame (JSON: hex name, regular, size, sent), then `sent` bytes in b"d"
    frames; then b"m" with the number of entries past `max_count`. Each entry is opened
    O_NOFOLLOW and non-blocking, so a symlink or FIFO cannot hand us another file or hang us;
    only a regular file no larger than `max_bytes` is read.
    """
    try:
        folder = os.open(OUTPUT, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        names = sorted(os.listdir(folder))
        for name in names[:max_count]:
            regular, size, data = False, 0, b""
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
            except OSError:
                fd = -1
            if fd >= 0:
                info = os.fstat(fd)
                if info.st_mode & 0o170000 == 0o100000:  # a regular file
                    regular, size = True, info.st_size
                    data = read_up_to(fd, max_bytes) if size <= max_bytes else b""
                os.close(fd)
            header = {"name": os.fsencode(name).hex(), "regular": regular, "size": size}
            emit(b"i", json.dumps(dict(header, sent=len(data))).encode())
            for start in range(0, len(data), IMAGE_CHUNK):
                emit(b"d", data[start : start + IMAGE_CHUNK])
        emit(b"m", str(max(0, len(names) - max_count)).encode())
    finally:
        os.close(folder)


def read_up_to(fd, size):
    data = bytearray()
    while len(data) < size and (part := os.read(fd, size - len(data))):
        data += part
    return bytes(data)


def kill_all():
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)  # as PID 1 this reaches every process but ourselves


def reap_all(run):
    while True:
        try:
            pid, status, rusage = os.wait4(-1, 0)
        except ChildProcessError:
            return
        if pid == run.main_pid and run.main_status is None:
            run.main_status, run.main_rusage = status, rusage


def serve_session(seccomp_bpf, session):
    """Session mode (see the module docstring): start the REPL driver, then relay until done."""
    cmd_r, cmd_w = os.pipe()
    reply_r, reply_w = os.pipe()
    null = os.open("/dev/null", os.O_RDWR)
    pid = os.fork()
    if pid == 0:
        # stderr stays ours until the driver points it at /dev/null: a start failure is told.
        child_fds = ((0, null), (1, null), (2, 2), (3, cmd_r), (4, reply_w))
        # The session's own copy of the supervisor's source (sessions/sandbox.driver_source).
        argv = ("python3", "-c", session["driver"], "3", "4", session["config"])
        become_program(seccomp_bpf, child_fds, argv, dict(BASE_ENV, **session["env"]))
    for fd in (cmd_r, reply_w, null):
        os.close(fd)
    wake_r = child_exits_fd()
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, "host")
    sel.register(reply_r, selectors.EVENT_READ, "driver")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    oom_before = oom_kills()
    emit(b"r", b"")
    deadline = time.monotonic() + session["lifetime_s"]
    done = False
    while not done and (left := deadline - time.monotonic()) > 0:
        for key, _ in sel.select(left):
            if key.data == "child":
                os.read(wake_r, READ_SIZE)
                done = reaped(pid)
            else:
                data = os.read(key.fd, READ_SIZE)
                # EOF from the host is its socket closing: it is gone, or it closed the session.
                done = not data or not write_all(cmd_w if key.data == "host" else 1, data)
            if done:
                break
    kill_all()
    with contextlib.suppress(ChildProcessError):
        while True:
            os.wait()
    facts = {"oom_killed": oom_kills() > oom_before, "pids_max_hit": pids_max_hit()}
    os.write(2, f"\n{session['facts_mark']}{json.dumps(facts)}\n".encode())


def reaped(pid):
    """Reap what ended; True once the driver (`pid`) is among it."""
    while True:
        try:
            ended, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if ended == 0:
            return False
        if ended == pid:
            return True


def write_all(fd, data):
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # the driver is gone (EPIPE) or the host is (stdout closed)
        return False
    return True


def main():
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, no /proc/1 reads
    # As PID 1 we only get signals we have a handler for; Python's SIGINT handler, the only one
    # the interpreter installs, would let the program interrupt us (KeyboardInterrupt), so it
    # goes (SIGCHLD: child_exits_fd). The program's interpreter installs its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seccomp_bpf, supervisor = base64.b64decode(sys.argv[1]), sys.argv[2]
    if len(sys.argv) > 3:
        serve_session(seccomp_bpf, json.loads(sys.argv[3]))
        return
    program = Program(seccomp_bpf, supervisor)
    emit(b"r", b"")  # warm: the host may hand this container out now
    msg = read_message()
    os.chdir(WORKDIR)
    write_files(msg["files"])
    Run(msg, program).execute()


main()
