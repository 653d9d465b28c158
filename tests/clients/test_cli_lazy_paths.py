"""What `undoable --help` and `undoable exec` import: the real command in a child process,
which lists its modules as it exits. The child starts with `-S` and the client's source and the
venv's packages on PYTHONPATH: the dev venv's editable-install finder (a .pth file) would
otherwise load pathlib, re and urllib.parse before the command starts, hiding what it imports.
No timings here: bench_cli.py measures them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

from tests.clients.conftest import CLIENT_SRC

# Applied in the child before the command runs: it names itself as the console script does,
# and writes the names of its modules to modules_file as it exits.
LAUNCH = """\
import atexit, sys
sys.argv[0] = "undoable"
modules_file = {modules_file!r}
atexit.register(lambda: open(modules_file, "w").write("\\n".join(sorted(sys.modules))))
{patch}
from undoable_client.cli.main import run
run()
"""
# The typer app renders the top-level help itself (the stored text is switched off).
TYPER_HELP = "from undoable_client.cli import top_help\ntop_help.show = lambda: False"
TYPER = {"typer", "typer.main"}
# Never on exec's way: the typer app and the heavy libraries, what the client's models and the
# standard library's conveniences cost at every start.
NOT_ON_EXEC = TYPER | {"click", "rich", "httpx", "keyring", "argparse", "pathlib", "dataclasses",
                       "inspect", "typing", "shutil", "undoable_client.client",
                       "undoable_client.models"}  # fmt: skip


Ran = tuple[subprocess.CompletedProcess, set[str]]


def command(tmp_path, *args: str, patch: str = "", stdin: str = "", columns: int = 100,
            env: dict[str, str] | None = None) -> Ran:  # fmt: skip
    """The command's result, and the modules it had loaded when it exited."""
    modules_file = tmp_path / "modules.txt"
    path = os.pathsep.join([str(CLIENT_SRC), sysconfig.get_path("purelib")])
    done = subprocess.run(
        [sys.executable, "-S", "-c", LAUNCH.format(modules_file=str(modules_file), patch=patch),
         *args],
        input=stdin, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
             "XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONPATH": path,
             "COLUMNS": str(columns), **(env or {})},
    )  # fmt: skip
    return done, set(modules_file.read_text().split())


def test_help_is_typers_own_text_printed_without_typer(tmp_path):
    stored, stored_modules = command(tmp_path, "--help")
    rendered, rendered_modules = command(tmp_path, "--help", patch=TYPER_HELP)
    assert (rendered.returncode, stored.returncode) == (0, 0), rendered.stderr + stored.stderr
    # On a mismatch: paste the rendering below into cli/top_help.py's TEXT.
    assert stored.stdout == rendered.stdout, rendered.stdout
    assert not stored_modules & TYPER, sorted(stored_modules & TYPER)
    assert rendered_modules >= TYPER  # the check above would see typer


@pytest.mark.parametrize("columns", [60, 79])
def test_at_a_narrower_terminal_typer_renders_the_help(tmp_path, columns):
    shown, modules = command(tmp_path, "--help", columns=columns)
    rendered, _ = command(tmp_path, "--help", columns=columns, patch=TYPER_HELP)
    assert modules >= TYPER
    assert shown.stdout == rendered.stdout and shown.returncode == 0


def test_help_run_as_a_module_is_left_to_typer(tmp_path):
    # click names the program `python -m ...` then: not the stored text's `undoable`.
    patch = "import __main__\n__main__.__package__ = 'undoable_client.cli'"
    _, modules = command(tmp_path, "--help", patch=patch)
    assert modules >= TYPER


def test_exec_loads_only_what_its_request_needs(tmp_path, scripted):
    done, modules = command(
        tmp_path, "exec", "-", "--timeout", "5", "--json", stdin="print(1)",
        env={"UNDOABLE_URL": scripted.url, "UNDOABLE_TOKEN": "udb_t"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stdout"] == "1\n"
    assert not modules & NOT_ON_EXEC, sorted(modules & NOT_ON_EXEC)
    assert "http.client" in modules  # the list is the command's own


def test_exec_with_the_config_file_loads_pathlib_alone_more(tmp_path, scripted):
    config = tmp_path / "config" / "undoable"
    config.mkdir(parents=True)
    (config / "config.json").write_text(json.dumps({"url": scripted.url, "token": "udb_t"}))
    done, modules = command(tmp_path, "exec", "-", stdin="print(1)")
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert modules & NOT_ON_EXEC == {"pathlib"}


def test_a_refused_exec_says_why_without_the_typer_app(tmp_path):
    # Nothing listens on port 9: the error path loads the errors, not typer.
    env = {"UNDOABLE_URL": "http://127.0.0.1:9", "UNDOABLE_TOKEN": "udb_t"}
    done, modules = command(tmp_path, "exec", "-", stdin="print(1)", env=env)
    assert done.returncode == 1 and "cannot reach http://127.0.0.1:9" in done.stderr
    assert not modules & NOT_ON_EXEC, sorted(modules & NOT_ON_EXEC)


def test_exec_forms_only_typer_parses_run_the_same_request(tmp_path, scripted):
    env = {"UNDOABLE_URL": scripted.url, "UNDOABLE_TOKEN": "udb_t"}
    done, modules = command(tmp_path, "exec", "--timeout=5", "-", stdin="print(1)", env=env)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert modules >= TYPER
    assert scripted.seen[0][2] == {"code": "print(1)", "language": "python", "timeout_s": 5}


@pytest.mark.parametrize(
    ("args", "parsed"),
    [
        (["-"], ("-", "python", None, False)),
        (["f.py", "--json"], ("f.py", "python", None, True)),
        (["-l", "bash", "-"], ("-", "bash", None, False)),
        (["--timeout", "2.5", "f.py", "--language", "bash"], ("f.py", "bash", 2.5, False)),
    ],
)
def test_plain_exec_arguments_are_read_without_typer(args, parsed):
    from undoable_client.cli.exec_command import parse_plain

    plain = parse_plain(args)
    assert plain is not None
    assert (plain.source, plain.language, plain.timeout_s, plain.json_out) == parsed


@pytest.mark.parametrize(
    "args",
    [[], ["--help"], ["-", "--frobnicate"], ["a.py", "b.py"], ["--language=bash", "-"],
     ["--", "-"], ["-", "-l"], ["-", "--timeout", "soon"], ["-", "-l", "-x"], [""], ["", "a.py"]],
)  # fmt: skip
def test_any_other_exec_arguments_are_left_to_typer(args):
    from undoable_client.cli.exec_command import parse_plain

    assert parse_plain(args) is None
