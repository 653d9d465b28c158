"""The one in-sandbox supervisor: a stateless run's, or a session's. Its source is handed to
the sandbox's python3 (`-c`, or as a code object by the bootstrap of bwrap_args.py); the host
never imports it. Everything it says to the host is in the frames of executor/policy/wire.py.

Stateless run (`main`; bwrap, the bwrap zygote and the Docker zygote, whose template calls
`main` in each run's first process, executor/policy/zygote_child.py): it runs as PID 1 of the
sandbox's PID namespace (bwrap --as-pid-1) with no signal handler, so nothing inside can signal
it (the kernel drops what the program sends to its namespace's init). It forks the program's
process at once; that child reports ready and blocks until the host sends ONE job (a b"j"
frame, marshal) on the job fd, then becomes the program. PID 1 reaps every orphan and reports
the program's raw wait status and CPU time on the status fd (JSON written here by hand: a few
fixed fields), which the host shape-checks.

Every single-use sandbox pays for what this file imports, once per run, so at the top it imports
only modules built into the interpreter or already loaded at start-up: the job is a `marshal`
message (not JSON: `json` pulls in `re` and `enum`, ~10 ms), tracebacks are printed by the
interpreter's own C hook (no `traceback` module, which also means a program out of memory or
file descriptors still gets one), and `ast` is imported only for interpreter mode.

Session (`serve_cells`, under bwrap and, relayed by the Docker supervisor, in a container): one
long-lived interpreter. The host sends b"c" commands (JSON) on the command fd and reads b"c"
replies (JSON) on the reply fd, after one b"r" ready; the program's own stdout/stderr never share
those pipes, so nothing a cell prints can forge a reply (a cell that writes on the reply pipe
itself meets the host's checks). Python cells run in one persistent namespace: the value of a
final bare expression is printed, a failing cell prints its traceback and keeps everything
defined before. Bash commands run in the same /workspace. The modules only sessions need are
imported when a session starts (_session_modules).
"""

import _signal  # the C module: `signal` would import enum
import atexit
import builtins
import gc
import io
import marshal
import os
import resource
import sys

WORKDIR = "/workspace"
# Modules a zygote template imported for every run (zygote_child.PRELOAD and what they import);
# none in a sandbox of its own.
PRELOADED: frozenset[str] = frozenset()
OUTPUT = "/workspace/output"  # executor/images.py: the host decides what of it is shown
# The environment a zygote's template set once (zygote_child.start) and every run inherits: a
# job with exactly this one changes nothing, where making it costs a forked run ~0.2 ms of page
# copies (docs/zygote.md). None in a sandbox of its own.
PRESET_ENV: dict[str, str] | None = None
# The program's output streams, made once by a zygote's template (zygote_child.start): made in
# each program's process, they cost it ~50 page copies. None in a sandbox of its own.
STREAMS = None
IMAGE_CHUNK = 256 * 1024  # image bytes per frame (wire.IMAGE_CHUNK)


def _frame(kind, payload):
    return kind + len(payload).to_bytes(4, "big") + payload


def _read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        part = os.read(fd, size - len(data))
        if not part:
            raise EOFError("channel closed")
        data += part
    return bytes(data)


def _apply_limits(rlimits):
    for name, value in rlimits.items():
        resource.setrlimit(getattr(resource, name), (value[0], value[1]))


def _set_environment(env):
    """The program's environment is exactly the job's."""
    if env == PRESET_ENV:
        return
    os.environ.clear()
    os.environ.update(env)


def _write_files(files):
    for name, blob in files.items():
        path = os.path.join(WORKDIR, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(blob)


def _unshadow_preloaded(files):
    """A job's own `json.py` or `string/` is what `import json` finds, as in a fresh interpreter
    (the workspace comes first on sys.path), not the module the template preloaded."""
    if not files:
        return
    tops = {name.split("/", 1)[0] for name in files}
    tops = {top[:-3] if top.endswith(".py") else top for top in tops}
    for module in PRELOADED:
        if module.split(".", 1)[0] in tops:
            sys.modules.pop(module, None)


def _report_exception(exc):
    # Skip this driver's own frame so the traceback looks like `python3 -c` would print it
    # (the interpreter's hook prints the exception's own __traceback__).
    if exc.__traceback__ is not None:
        exc.__traceback__ = exc.__traceback__.tb_next
    sys.stdout.flush()
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)  # the program may have its own
    except BaseException:
        sys.__excepthook__(type(exc), exc, exc.__traceback__)


def _prepare():
    """What every job needs, done while the sandbox waits for one. A forked process pays a
    page copy for each page it first writes to; here those copies happen before the job, not
    while someone waits for its result (docs/zygote.md has the figures)."""
    if PRESET_ENV is None:
        os.environ.clear()  # the job's own is set once it arrives (_set_environment)
    os.umask(0o022)
    os.chdir(WORKDIR)
    sys.stdout, sys.stderr = STREAMS or output_streams()
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    sys.path.insert(0, WORKDIR)
    return main


def output_streams():
    """The program's stdout and stderr, on fds 1 and 2, unbuffered like `python3 -u` so output
    streams while the program runs. A stream decides once whether its file is seekable: fds 1
    and 2 must be pipes, as the program's are, when they are made."""
    stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), write_through=True, errors="backslashreplace"
    )
    return stdout, stderr


def _run_python(job, main):
    code = job["code"]
    status = 0
    try:
        if job.get("interpreter_mode"):
            import ast

            # compile() itself, not ast.parse(): a syntax error then shows no frame of ours.
            module: ast.Module = compile(code, "<string>", "exec", ast.PyCF_ONLY_AST)  # type: ignore[assignment]
            for stmt in module.body:
                single = ast.Interactive(body=[stmt])
                exec(compile(single, "<string>", "single"), main.__dict__)  # noqa: S102
        else:
            exec(compile(code, "<string>", "exec"), main.__dict__)  # noqa: S102
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        _report_exception(exc)
        status = 1
    _fast_exit(status, main)


def _exit_status(exc):
    """What the interpreter would exit with for an uncaught SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    sys.stdout.flush()
    print(exc.code, file=sys.stderr)
    return 1


def _fast_exit(status, main):
    # The program's side of interpreter shutdown (threads joined, atexit run, the program's own
    # objects finalized, output flushed) without tearing down every module: a forked
    # interpreter's full finalization costs ms, and the whole sandbox is thrown away right after.
    try:
        _save_figures()
        threading = sys.modules.get("threading")
        if threading is not None:  # a program that never imported it started no such thread
            # Private on purpose: the same join-non-daemon-threads step Py_FinalizeEx runs.
            threading._shutdown()
        atexit._run_exitfuncs()
        # Dropping the program's globals closes files it never closed (`f = open(...)` at top
        # level), so their buffered writes land in the workspace as with a normal exit.
        main.__dict__.clear()
        _collect_the_programs_garbage()
    except BaseException as exc:
        _report_exception(exc)
        status = status or 1
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib is one more import for every sandbox
            stream.flush()
        except BaseException:  # noqa: S110 - a closed or broken stdout is not a crash
            pass
    os._exit(status)


def _collect_the_programs_garbage():
    """What the interpreter's exit collects: the program's unreachable cycles, their `__del__`
    run.

    Everything older than the program is frozen (main). Until a collection has run, every object
    the program made is in the youngest generation, and collecting that one is enough; a full
    collection would also empty the interpreter's free lists, ~45 page copies (docs/zygote.md).
    """
    if gc.get_objects(generation=1) or gc.get_objects(generation=2):
        gc.collect()
    else:
        gc.collect(0)


def _save_figures():
    # Figures left open are saved like Jupyter's inline backend shows them; only a program that
    # imported pyplot pays for it.
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    # Made only when needed: an fs run's /workspace is the person's folder, not ours to fill.
    os.makedirs(OUTPUT, exist_ok=True)
    for number in pyplot.get_fignums():
        pyplot.figure(number).savefig(f"{OUTPUT}/figure-{number}.png")
    pyplot.close("all")


def _send_images(status_fd, max_count, max_bytes):
    """Propose the output folder's first entries to the host, which decides (executor/images.py).

    Per entry: an b"i" frame (JSON: hex name, regular, size, sent), then `sent` bytes in b"d"
    frames; then b"m" with the number of entries past `max_count` (wire.py). Each entry is
    opened O_NOFOLLOW and non-blocking, so a symlink or FIFO cannot hand us another file or
    hang us; only a regular file no larger than `max_bytes` is read.
    """
    try:
        folder = os.open(OUTPUT, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    names = sorted(os.listdir(folder))
    for name in names[:max_count]:
        regular, size, data = b"false", 0, b""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        except OSError:
            fd = -1
        if fd >= 0:
            info = os.fstat(fd)
            if info.st_mode & 0o170000 == 0o100000:  # S_ISREG without importing stat
                regular, size = b"true", info.st_size
                data = os.read(fd, max_bytes) if size <= max_bytes else b""
            os.close(fd)
        header = b'{"name": "%s", "regular": %s, "size": %d, "sent": %d}' % (
            os.fsencode(name).hex().encode(),
            regular,
            size,
            len(data),
        )
        frames = [_frame(b"i", header)]
        for at in range(0, len(data), IMAGE_CHUNK):
            frames.append(_frame(b"d", data[at : at + IMAGE_CHUNK]))
        _write_all(status_fd, b"".join(frames))
    _write_all(status_fd, _frame(b"m", b"%d" % max(0, len(names) - max_count)))
    os.close(folder)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _run_bash(job):
    for sig in (_signal.SIGPIPE, _signal.SIGXFSZ, _signal.SIGINT):
        _signal.signal(sig, _signal.SIG_DFL)
    code = job["code"]
    if len(code.encode()) < 100_000:
        os.execve("/bin/bash", ["bash", "-c", code], dict(os.environ))  # noqa: S606
    # Too long for one argv string: hand bash the script through a memfd instead.
    script = os.memfd_create("script", 0)
    os.write(script, code.encode())
    os.lseek(script, 0, os.SEEK_SET)
    os.execve("/bin/bash", ["bash", f"/proc/self/fd/{script}"], dict(os.environ))  # noqa: S606


def _child(job, status_fd, main):
    os.close(status_fd)
    _set_environment(job["env"])
    _write_files(job["files"])
    _unshadow_preloaded(job["files"])
    _apply_limits(job["rlimits"])
    if job["language"] == "bash":
        _run_bash(job)
    _run_python(job, main)


def _receive_and_run(job_fd, status_fd):
    main = _prepare()
    os.write(status_fd, _frame(b"r", b""))
    header = _read_exact(job_fd, 5)
    if header[:1] != b"j":
        raise ValueError(f"expected a job frame, got {header[:1]!r}")
    # The job comes from the host through a pipe only it holds: trusted input.
    job = marshal.loads(_read_exact(job_fd, int.from_bytes(header[1:], "big")))  # noqa: S302
    os.close(job_fd)
    _child(job, status_fd, main)


def program(job_fd, status_fd):
    """The program's process: ready, its one job, then the program. Under bwrap, PID 1's child;
    in a Docker container, started by that container's own PID 1 (backends/docker/driver.py)."""
    try:
        _receive_and_run(job_fd, status_fd)
    except BaseException as exc:
        if isinstance(exc, EOFError):
            os._exit(125)  # the host discarded this sandbox unused
        sys.stderr.write(f"sandbox: could not start the program: {exc!r}\n")
        os._exit(126)


def main(job_fd, status_fd, max_images=0, max_image_bytes=0):
    # Everything alive now is the interpreter's own: the program's final gc.collect() need not
    # walk it (and touching it would copy the shared pages into the child).
    gc.freeze()
    # As PID 1 of its namespace the supervisor gets only the signals it has a handler for: with
    # none, the kernel drops whatever the program sends it. Python's SIGINT handler is the only
    # one the interpreter installs (SIGPIPE and SIGXFSZ are ignored), so it goes, before the
    # program's process exists; that process gets it back, as any python3 has it.
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    # Fork before the job arrives, so a warm sandbox's run does not pay for the fork.
    pid = os.fork()
    if pid == 0:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
        program(job_fd, status_fd)
    os.close(job_fd)
    # The supervisor keeps no copy of the program's pipes: EOF must mean the program is done.
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        try:
            done, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            os._exit(2)
        if done == pid:
            break
    # The CPU time too: the host names a CPU-time kill from it (executor/stops.py).
    cpu_us = int((usage.ru_utime + usage.ru_stime) * 1_000_000)
    try:  # noqa: SIM105 - contextlib is one more import for every sandbox
        _send_images(status_fd, max_images, max_image_bytes)
    except OSError:  # noqa: S110 - the program's images are optional; its status is not
        pass
    _write_all(status_fd, _frame(b"s", b'{"wait_status": %d, "cpu_us": %d}' % (status, cpu_us)))
    os._exit(0)


# The session's side. Its modules are bound here by _session_modules() when a session starts,
# so that a stateless run never imports them.
SESSION_OUT, SESSION_ERR = "/tmp/.session-stdout", "/tmp/.session-stderr"
TYPE_CHECKING = False  # what type checkers take as true; `typing` would cost every sandbox
if TYPE_CHECKING:
    import ast
    import importlib
    import json
    import linecache
    import signal
    import site
    import subprocess
    import time
    import traceback


def _session_modules():
    global ast, importlib, json, linecache, signal, site, subprocess, time, traceback
    import ast
    import importlib
    import json
    import linecache
    import signal
    import site
    import subprocess
    import time
    import traceback


class CellTimeout(BaseException):
    """Raised in the cell by SIGALRM; BaseException so `except Exception` in a cell misses it."""


def _on_alarm(signum, frame):
    raise CellTimeout()


def _redirect(out_path, err_path):
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, out_path), (2, err_path)):
        new = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(new, fd)
        os.close(new)


def _collect(path, limit):
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    return data[:limit].decode("utf-8", "replace"), len(data) > limit


def _print_cell_exception(exc):
    tb = exc.__traceback__
    # Hide the supervisor's own frames (its source is "<string>"): the person sees their cell.
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    if isinstance(exc, SyntaxError):
        tb = None
    traceback.print_exception(type(exc), exc, tb)


class Repl:
    def __init__(self, max_output):
        self.max_output = max_output
        self.cells = 0
        main = type(sys)("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        self.namespace = main.__dict__

    def python(self, code, timeout_s):
        self.cells += 1
        name = f"<cell {self.cells}>"
        # Tracebacks show the cell's source lines, like the interactive interpreter.
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        importlib.invalidate_caches()  # a package pip-installed by the last cell is importable
        exit_code: int | None = 0  # None: the cell timed out, no exit status
        timed_out = False
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            try:
                tree = ast.parse(code, name, "exec")
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, name, "exec"), self.namespace)  # noqa: S102 - the cell is the job
                if last is not None:
                    value = eval(compile(last, name, "eval"), self.namespace)  # noqa: S307
                    if value is not None:
                        self.namespace["_"] = value
                        print(repr(value))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except CellTimeout:
            timed_out, exit_code = True, None
            sys.stderr.write(f"TimeoutError: the cell ran longer than {timeout_s:g}s\n")
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                exit_code = exc.code or 0
            else:
                sys.stderr.write(f"{exc.code}\n")
                exit_code = 1
        except BaseException as exc:
            _print_cell_exception(exc)
            exit_code = 1
        try:
            _save_figures()
        except Exception as exc:  # a figure that cannot be saved is the cell's error
            _print_cell_exception(exc)
            exit_code = exit_code or 1
        return exit_code, timed_out

    def bash(self, code, timeout_s):
        proc = subprocess.Popen(
            ["/bin/bash", "-c", code], cwd=WORKDIR, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout_s), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            sys.stderr.write(f"TimeoutError: the command ran longer than {timeout_s:g}s\n")
            return None, True

    def run(self, command):
        started = time.monotonic()
        _redirect(SESSION_OUT, SESSION_ERR)
        try:
            if command["language"] == "bash":
                exit_code, timed_out = self.bash(command["code"], command["timeout_s"])
            else:
                exit_code, timed_out = self.python(command["code"], command["timeout_s"])
        finally:
            _redirect("/dev/null", "/dev/null")
        stdout, cut_out = _collect(SESSION_OUT, self.max_output)
        stderr, cut_err = _collect(SESSION_ERR, self.max_output)
        return {
            "exit_code": exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "timed_out": timed_out,
            "truncated": cut_out or cut_err,
            "duration_s": time.monotonic() - started,
        }


def serve_cells(command_fd, reply_fd, config):
    """A session: one b"r" ready frame, then one b"c" reply per b"c" command, until the host
    closes the command pipe. `config` (JSON): the rlimits and the per-cell output cap."""
    _session_modules()
    config = json.loads(config)
    # Keep the protocol pipes away from everything the cells start.
    for fd in (command_fd, reply_fd):
        os.set_inheritable(fd, False)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for name, (soft, hard) in config["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    os.umask(0o022)
    os.chdir(WORKDIR)
    sys.stdout, sys.stderr = output_streams()
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.argv = [""]
    sys.path.insert(0, WORKDIR)
    # `pip install --user` puts packages here; add it now so they import without a restart.
    user_site = site.getusersitepackages()
    if user_site not in sys.path:
        sys.path.append(user_site)
    signal.signal(signal.SIGALRM, _on_alarm)
    repl = Repl(config["max_output_bytes"])
    _write_all(reply_fd, _frame(b"r", b""))
    while True:
        try:
            header = _read_exact(command_fd, 5)
            command = json.loads(_read_exact(command_fd, int.from_bytes(header[1:], "big")))
        except EOFError:
            os._exit(0)
        if header[:1] != b"c":
            os._exit(2)  # not the host's framing: nothing here to trust
        _write_all(reply_fd, _frame(b"c", json.dumps(repl.run(command)).encode()))


if __name__ == "__main__":
    if len(sys.argv) == 4:  # a session: command fd, reply fd, config (JSON)
        serve_cells(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 3:  # a Docker container's program: job fd, ready fd
        program(int(sys.argv[1]), int(sys.argv[2]))
    else:  # a stateless run: job fd, status fd, image caps
        main(*(int(arg) for arg in sys.argv[1:5]))
