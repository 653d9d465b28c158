"""`undoable exec`'s one-shot transport (cli/oneshot.py) against a scripted local server:
nothing heavy imported, a 429 retried after its Retry-After, a proxy honoured through httpx."""

from __future__ import annotations

from tests.clients.cli import Cli

# Neither typer, rich nor httpx may load on the way: importing one fails.
NO_HEAVY_IMPORTS = (
    "import sys\nfor name in ('typer', 'rich', 'httpx'):\n    sys.modules[name] = None"
)


def test_exec_loads_neither_typer_rich_nor_httpx(tmp_path, scripted):
    done = Cli(tmp_path, scripted.url, "udb_t").run("exec", "-", input="print(1)",
                                                    patch=NO_HEAVY_IMPORTS)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    path, headers, body = scripted.seen[0]
    assert (path, headers["Authorization"], body) == (
        "/api/v1/exec",
        "Bearer udb_t",
        {"code": "print(1)", "language": "python"},
    )


def test_exec_asks_again_after_a_429s_retry_after(tmp_path, scripted):
    scripted.answers = [(429, {"Retry-After": "0"})]
    done = Cli(tmp_path, scripted.url, "udb_t").run("exec", "-", "--timeout", "5", input="x")
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert [body["timeout_s"] for _, _, body in scripted.seen] == [5, 5]


def test_exec_with_options_it_does_not_know_falls_back_to_the_full_command(tmp_path):
    done = Cli(tmp_path, "http://127.0.0.1:9", "udb_t").run("exec", "-", "--frobnicate")
    assert done.returncode == 2 and "No such option" in done.stderr


def test_with_a_proxy_in_the_environment_exec_goes_through_it(tmp_path, scripted):
    cli = Cli(tmp_path, "http://undoable.invalid", "udb_t")
    cli.env["HTTP_PROXY"] = scripted.url
    done = cli.run("exec", "-", input="print(1)")
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert scripted.seen[0][0] == "http://undoable.invalid/api/v1/exec"  # the proxy's form
