"""The REPL driver of a stateful session. Its source is handed to the sandbox's python3 with -c.

One long-lived interpreter per session. The host sends commands on the command fd and reads
replies on the reply fd, in the frames of executor/policy/wire.py (1-byte kind, 4-byte length,
JSON: b"c" a command or a cell's reply, b"r" ready), which the host caps and shape-checks; the
program's own stdout/stderr never share those pipes, so nothing a cell prints can forge a reply.
Python cells run in one persistent namespace: the value of a final bare expression is printed, a
failing cell prints its traceback and keeps everything defined before. Bash commands run in the same
/workspace. Standard library only: this runs under the rootfs's python3.
"""

import ast
import builtins
import importlib
import io
import json
import linecache
import os
import resource
import signal
import site
import subprocess
import sys
import time
import traceback
import types

WORKDIR = "/workspace"
OUTPUT = "/workspace/output"  # executor/images.py: the host decides what of it is shown
OUT, ERR = "/tmp/.session-stdout", "/tmp/.session-stderr"


class CellTimeout(BaseException):
    """Raised in the cell by SIGALRM; BaseException so `except Exception` in a cell misses it."""


def _on_alarm(signum, frame):
    raise CellTimeout()


def _read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        part = os.read(fd, size - len(data))
        if not part:
            raise EOFError("command channel closed")
        data += part
    return bytes(data)


def _send(fd, kind, body):
    view = memoryview(kind + len(body).to_bytes(4, "big") + body)
    while view:
        view = view[os.write(fd, view) :]


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


def _print_exception(exc):
    tb = exc.__traceback__
    # Hide the driver's own frames (its source is "<string>"): the person sees their cell only.
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    if isinstance(exc, SyntaxError):
        tb = None
    traceback.print_exception(type(exc), exc, tb)


def _save_figures():
    # Like Jupyter's inline backend: the figures a cell leaves open are shown, then closed.
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    os.makedirs(OUTPUT, exist_ok=True)
    for number in pyplot.get_fignums():
        pyplot.figure(number).savefig(f"{OUTPUT}/figure-{number}.png")
    pyplot.close("all")


class Repl:
    def __init__(self, max_output):
        self.max_output = max_output
        self.cells = 0
        main = types.ModuleType("__main__")
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
                exec(compile(tree, name, "exec"), self.namespace)  # noqa: S102 - running the cell is the job
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
            _print_exception(exc)
            exit_code = 1
        try:
            _save_figures()
        except Exception as exc:  # a figure that cannot be saved is the cell's error
            _print_exception(exc)
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
        _redirect(OUT, ERR)
        try:
            if command["language"] == "bash":
                exit_code, timed_out = self.bash(command["code"], command["timeout_s"])
            else:
                exit_code, timed_out = self.python(command["code"], command["timeout_s"])
        finally:
            _redirect("/dev/null", "/dev/null")
        stdout, cut_out = _collect(OUT, self.max_output)
        stderr, cut_err = _collect(ERR, self.max_output)
        return {
            "exit_code": exit_code,
            "stdout": stdout,
            "stderr": stderr,
            "timed_out": timed_out,
            "truncated": cut_out or cut_err,
            "duration_s": time.monotonic() - started,
        }


def main(command_fd, reply_fd, config):
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
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), write_through=True, errors="backslashreplace"
    )
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.argv = [""]
    sys.path.insert(0, WORKDIR)
    # `pip install --user` puts packages here; add it now so they import without a restart.
    user_site = site.getusersitepackages()
    if user_site not in sys.path:
        sys.path.append(user_site)
    signal.signal(signal.SIGALRM, _on_alarm)
    repl = Repl(config["max_output_bytes"])
    _send(reply_fd, b"r", b"")
    while True:
        try:
            header = _read_exact(command_fd, 5)
            command = json.loads(_read_exact(command_fd, int.from_bytes(header[1:], "big")))
        except EOFError:
            os._exit(0)
        if header[:1] != b"c":
            os._exit(2)  # not the host's framing: nothing here to trust
        _send(reply_fd, b"c", json.dumps(repl.run(command)).encode())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]))
