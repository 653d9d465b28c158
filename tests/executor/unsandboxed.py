"""A deliberately UNSAFE backend for the sabotage proof. Test-only; never register it.

It runs the program with plain subprocess on the host: no namespaces, no seccomp, no limits,
the host's environment inherited, the host's filesystem in view. It exists so that
test_sabotage.py can show that every deny check in the hostile suite reports a violation when
the sandbox is switched off, i.e. that no deny test passes vacuously.

Two concessions keep the host in one piece, and neither is isolation:
- the program runs as a dedicated unprivileged uid (SABOTAGE_UID) that no other process on the
  machine uses, so `kill -9 -1` can only hit our own sentinel, and the run cannot read the
  host's credentials (/etc/shadow, pid 1's environment);
- a safety net kills the process group after `safety_kill_s`. It is not a limit: the result
  says timed_out=False, because nothing enforced the requested wall time.

Like a real backend, the program is started by a supervisor process (the "launcher") that
inherited the host environment, the way bwrap would if it were not started with an empty one.
With pid_namespace=True the launcher is pid 1 of a new pid namespace (and nothing else is
isolated), the exact setup in which a leaked environment shows up in /proc/1/environ.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from executor.cancel import CancelToken
from executor.limits import Limits
from executor.result import OutputCallback, OutputChunk, RunResult, Stream
from executor.spec import RunSpec

SABOTAGE_UID = 64128  # its own: no other test module's sandboxes run as it
HOST_PYTHON = "/usr/bin/python3"
TEMP_ROOT = Path(tempfile.gettempdir()) / "undoable-unsandboxed"

# Waits for its child and dies the same way, so the backend sees the program's exit status.
_LAUNCHER = """
import os, signal, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot (and need not) be reset
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(os.waitstatus_to_exitcode(status))
"""

# Echo bare expressions like the interactive interpreter ('single' mode prints their repr).
_ECHO_RUNNER = """
import ast, sys
source = open(sys.argv[1]).read()
tree = ast.parse(source, sys.argv[1])
namespace = {"__name__": "__main__"}
for node in tree.body:
    mode = "single" if isinstance(node, ast.Expr) else "exec"
    module = ast.Interactive([node]) if mode == "single" else ast.Module([node], [])
    exec(compile(module, sys.argv[1], mode), namespace)
"""


class UnsandboxedBackend:
    """Runs code straight on the host. UNSAFE: only for proving the deny checks can fail."""

    name = "unsandboxed"

    def __init__(
        self,
        *,
        uid: int = SABOTAGE_UID,
        pid_namespace: bool = False,
        safety_kill_s: float = 20.0,
    ) -> None:
        self.uid = uid
        self.pid_namespace = pid_namespace
        self.safety_kill_s = safety_kill_s
        TEMP_ROOT.mkdir(mode=0o711, exist_ok=True)

    def self_check(self) -> None:
        """Nothing to check: there is no sandbox."""

    def close(self) -> None:
        """Nothing is kept between runs."""

    def run(
        self,
        spec: RunSpec,
        *,
        limits: Limits,
        on_output: OutputCallback | None = None,
        cancel: CancelToken | None = None,
    ) -> RunResult:
        """Run `spec` on the host. `limits` is accepted and ignored: there is no sandbox."""
        workdir = Path(tempfile.mkdtemp(prefix="run-", dir=TEMP_ROOT))
        try:
            argv = self._prepare(spec, workdir)
            return self._supervise(argv, spec, workdir, on_output, cancel)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _prepare(self, spec: RunSpec, workdir: Path) -> list[str]:
        for name, content in spec.files.items():
            path = workdir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        if spec.language == "bash":
            (workdir / "main.sh").write_text(spec.code)
            program = ["/bin/bash", "main.sh"]
        elif spec.interpreter_mode:
            (workdir / "main.py").write_text(spec.code)
            program = [HOST_PYTHON, "-I", "-c", _ECHO_RUNNER, "main.py"]
        else:
            (workdir / "main.py").write_text(spec.code)
            program = [HOST_PYTHON, "-I", "main.py"]
        for path in [workdir, *workdir.rglob("*")]:
            os.chown(path, self.uid, self.uid)
        launcher = [HOST_PYTHON, "-I", "-S", "-c", _LAUNCHER, *program]
        if not self.pid_namespace:
            return launcher
        drop = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]
        return ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *drop, *launcher]

    def _supervise(
        self,
        argv: list[str],
        spec: RunSpec,
        workdir: Path,
        on_output: OutputCallback | None,
        cancel: CancelToken | None,
    ) -> RunResult:
        started = time.monotonic()
        # The host environment on purpose: this is what a sandbox must never pass through.
        env = {**os.environ, **spec.env}
        ids = {} if self.pid_namespace else {"user": self.uid, "group": self.uid}
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            extra_groups=[] if ids else None,
            **ids,
        )
        collector = _Collector(on_output)
        readers = [
            threading.Thread(target=collector.pump, args=(proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=collector.pump, args=(proc.stderr, "stderr"), daemon=True),
        ]
        for reader in readers:
            reader.start()
        cancelled = threading.Event()

        def stop() -> None:
            cancelled.set()
            _kill_group(proc)

        if cancel is not None:
            cancel.on_cancel(stop)
        assert proc.stdin is not None
        try:
            proc.stdin.write(spec.stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            returncode = proc.wait(timeout=self.safety_kill_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode = proc.wait()
        # A daemon that kept our pipes open must not hold the run hostage.
        for reader in readers:
            reader.join(timeout=2.0)
        return RunResult(
            exit_code=returncode if returncode >= 0 else None,
            signal=-returncode if returncode < 0 else None,
            stdout=collector.text("stdout"),
            stderr=collector.text("stderr"),
            timed_out=False,
            oom_killed=False,
            truncated=False,
            duration_s=time.monotonic() - started,
            cancelled=cancelled.is_set(),
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


class _Collector:
    """Numbers chunks across both streams and never splits a UTF-8 character."""

    def __init__(self, on_output: OutputCallback | None) -> None:
        self._on_output = on_output
        self._lock = threading.Lock()
        self._seq = 0
        self._parts: dict[Stream, list[str]] = {"stdout": [], "stderr": []}

    def pump(self, pipe: object, stream: Stream) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = pipe.fileno()  # type: ignore[attr-defined]
        while True:
            data = os.read(fd, 65536)
            text = decoder.decode(data, final=not data)
            if text:
                self._emit(stream, text)
            if not data:
                return

    def _emit(self, stream: Stream, text: str) -> None:
        with self._lock:
            chunk = OutputChunk(seq=self._seq, stream=stream, text=text)
            self._seq += 1
            self._parts[stream].append(text)
            if self._on_output is not None:
                self._on_output(chunk)

    def text(self, stream: Stream) -> str:
        with self._lock:
            return "".join(self._parts[stream])
