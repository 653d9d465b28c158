"""The client is a package of its own: it installs into an empty venv, imports with no Django or
Celery there, and runs code against a live server in both its flavours."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("sessions")]

# Runs in the empty venv: argv[1:3] are the server's URL and a token.
SCRIPT = r"""
import asyncio
import importlib.util
import sys

from undoable_client import AsyncClient, Client

print([name for name in ("django", "celery", "webapp") if importlib.util.find_spec(name)])
url, token = sys.argv[1:3]
print(Client(url, token).exec("print(6 * 7)").stdout, end="")


async def main():
    client = AsyncClient(url, token)
    print((await client.exec("print('async')")).stdout, end="")
    async with await client.session() as session:
        await session.exec("x = 40")
        print((await session.exec("x + 2")).stdout, end="")


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the client package and its dependencies (httpx's) installed, not even pip."""
    root = tmp_path_factory.mktemp("client-venv")
    source = shutil.copytree(PACKAGE, root / "source")  # the build writes next to its source
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    # The running pip installs into that venv (--python), its dependencies pinned by the
    # project's constraints. Setuptools builds the wheel in an isolated environment.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--no-input",
            "--constraint",
            CONSTRAINTS,
            source,
        ],
        check=True,
        timeout=300,
    )
    return python


def test_the_client_package_brings_no_server_side_package(client_venv):
    site = subprocess.run(
        [client_venv, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    installed = {p.name.lower() for p in Path(site).iterdir()}
    assert {"undoable_client", "httpx"} <= installed
    assert not installed & {"django", "celery", "webapp", "executor", "openai"}


def test_the_installed_client_runs_code_with_no_django_present(client_venv, app_server, owner):
    done = subprocess.run(
        [client_venv, "-c", SCRIPT, app_server, owner.token],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=client_venv.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n42\nasync\n42\n"


def test_the_installed_undoable_command_runs_code_from_stdin(client_venv, app_server, owner):
    undoable = client_venv.parent / "undoable"
    assert "session" in subprocess.run([undoable, "--help"], capture_output=True, text=True,
                                       check=True).stdout  # fmt: skip
    env = {"UNDOABLE_URL": app_server, "UNDOABLE_TOKEN": owner.token, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([undoable, "exec", "-"], input="print(6 * 7)\nraise SystemExit(2)",
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "42\n")
