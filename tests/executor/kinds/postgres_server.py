"""A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temp folder, as `postgres`."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.local_servers import free_port

BIN = Path("/usr/lib/postgresql/15/bin")
PASSWORD = "kinds-test-pw"


def _as_postgres(*argv: str) -> None:
    # No pipes: the server pg_ctl starts would hold them open and block us forever.
    subprocess.run(
        ["runuser", "-u", "postgres", "--", *argv],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


class PostgresServer:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="undoable-pg-"))
        shutil.chown(self.folder, "postgres", "postgres")
        self.port = free_port()
        pwfile = self.folder / "pw"
        pwfile.write_text(PASSWORD + "\n")
        shutil.chown(pwfile, "postgres", "postgres")
        data = self.folder / "data"
        _as_postgres(
            str(BIN / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
        )
        options = f"-c listen_addresses=127.0.0.1 -c fsync=off -p {self.port} -k {self.folder}"
        log = str(self.folder / "server.log")
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-l", log, "-o", options, "-w", "start")
        self.url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        _as_postgres(str(BIN / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
