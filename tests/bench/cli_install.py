"""The client package as users get it, for bench_cli: a wheel built from the local tree and
installed (not editable) in a throwaway venv, with the console script pip writes. Offline:
nothing is downloaded, so the wheel is built without build isolation by this venv's setuptools
(its `dev` dependencies: >= 70.1, which builds wheels itself)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

# What a build leaves next to its source, and bytecode: not copied.
LEFTOVERS = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")


class InstallFailed(Exception):
    """A step of the install failed; the message says which, with pip's own output."""


def _run(argv: list[str | Path], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallFailed(f"{what} failed (exit {done.returncode}):\n{done.stderr.strip()}")
    return done.stdout


def install_client(project: Path, scratch: Path) -> Path:
    """A venv in `scratch` with the client package from `project` (clients/python) installed
    from its wheel; its path. Its dependencies are this venv's own, already installed (not
    editable): this venv's site-packages is on its path through a .pth line. Python reads the
    .pth files of a venv's own site-packages only, so this venv's editable-install finder (and
    the Django project it maps) stays out."""
    # The build writes next to its source (build/, *.egg-info): it builds a copy.
    source = shutil.copytree(project, scratch / "client-source", ignore=LEFTOVERS)
    wheels = scratch / "wheels"
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", wheels, source], "building the client's wheel (needs setuptools "
         ">= 70.1 here: `make` installs it with the dev dependencies)")  # fmt: skip
    venv = scratch / "client-venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], "making the venv")
    python = venv / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                   "asking the venv for its site-packages").strip()  # fmt: skip
    (Path(purelib) / "dev-venv-packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run([*pip, "--python", python, "install", "--quiet", "--no-deps", "--no-index",
          *sorted(wheels.glob("*.whl"))], "installing the wheel")  # fmt: skip
    return venv


def console_script(folder: Path, python: str) -> str:
    """A console script for `undoable` run by `python`, as pip writes one (for the source tree
    in the dev venv, where the package is not installed); its path."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "undoable"
    script.write_text(f"#!{python}\nimport sys\nfrom undoable_client.cli.main import run\n"
                      "if __name__ == '__main__':\n    sys.exit(run())\n")  # fmt: skip
    script.chmod(0o755)
    return str(script)
