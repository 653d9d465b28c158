"""`undoable connect`: OAuth for native apps against a real local provider; the test plays
the browser (it follows the address the command prints to the loopback redirect)."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import pytest

from tests.clients.cli import Cli
from tests.fakes.oauth_provider import FakeOAuthProvider

CANARY = "canary-connect-0d4e2b"
CLIENT_ID = "undoable-cli-test"
HERE = Path(__file__).resolve().parent
# Sabotages, applied in the command's own process.
LOOPBACK = "from undoable_client.cli import oauth_loopback\n"
ANY_STATE = LOOPBACK + "oauth_loopback.state_matches = lambda a, b: True"
NO_PKCE = LOOPBACK + "oauth_loopback.pkce_pair = lambda: ('', '')"
NO_VERIFIER = (
    LOOPBACK + "form = oauth_loopback.token_form\n"
    "oauth_loopback.token_form = lambda *a, **k: {n: v for n, v in form(*a, **k).items()"
    " if n != 'code_verifier'}"
)
ALL_ADDRESSES = LOOPBACK + "oauth_loopback.BIND_HOST = '0.0.0.0'"
NEVER_CLOSED = LOOPBACK + "oauth_loopback.LoopbackListener.close = lambda self: None"


@pytest.fixture
def provider() -> Iterator[FakeOAuthProvider]:
    # A public client (no secret) whose redirect is the loopback one, on any port.
    with FakeOAuthProvider(client_id=CLIENT_ID, client_secret="",
                           redirect_uris=["http://127.0.0.1/callback"],
                           scopes=["items.read", "items.write"]) as fake:  # fmt: skip
        yield fake


@pytest.fixture
def cli(tmp_path, provider) -> Cli:
    cli = Cli(tmp_path)
    # github is built in: the test points its endpoints at the fake, as any setting may.
    cli.env.update(
        UNDOABLE_CONNECT_GITHUB_AUTHORIZE_URL=provider.authorize_url,
        UNDOABLE_CONNECT_GITHUB_TOKEN_URL=provider.token_url,
        UNDOABLE_CONNECT_GITHUB_CLIENT_ID=CLIENT_ID,
        UNDOABLE_CONNECT_GITHUB_SCOPES="items.read items.write",
    )
    return cli


class Connecting:
    def __init__(self, child: subprocess.Popen[str], url: str, lead: str) -> None:
        self.child, self.url, self.lead = child, url, lead
        self.port = 0

    def redirect(self) -> str:
        """The browser's visit to the provider: where it is sent back to."""
        answer = httpx.get(self.url, timeout=30)
        assert answer.status_code == 302, answer.text
        location = answer.headers["location"]
        self.port = int(urlparse(location).port or 0)
        return location

    def finish(self) -> tuple[int, str]:
        out, err = self.child.communicate(timeout=60)
        return self.child.returncode, out + self.lead + err


@contextmanager
def connecting(cli: Cli, *args: str, patch: str = "") -> Iterator[Connecting]:
    argv = cli.argv(["connect", *args], patch)
    pipe = subprocess.PIPE
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe, text=True,
                             env=cli.env, cwd=cli.home)  # fmt: skip
    try:
        assert child.stderr is not None
        lead = shown = ""
        while not shown.startswith("http"):
            shown = child.stderr.readline()
            assert shown, child.communicate(timeout=30)
            lead += shown
        yield Connecting(child, shown.strip(), lead)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def signed_in(cli: Cli, *args: str, patch: str = "") -> tuple[int, str]:
    with connecting(cli, *args, "--no-browser", patch=patch) as flow:
        httpx.get(flow.redirect(), timeout=30)
        return flow.finish()


def kept(cli: Cli) -> dict[str, object]:
    path = cli.home / "config" / "undoable" / "credentials.json"
    return json.loads(path.read_text()) if path.exists() else {}


def refused_at(port: int, host: str = "127.0.0.1") -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_connect_signs_in_in_the_browser_and_keeps_the_token_unseen(cli, provider):
    provider.issue_access_token(CANARY)
    status, shown = signed_in(cli, "github")
    assert status == 0, shown
    assert "kept GITHUB_TOKEN" in shown and CANARY not in shown
    store = cli.home / "config" / "undoable" / "credentials.json"
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    assert kept(cli)["values"] == {"GITHUB_TOKEN": CANARY}
    assert cli.run("creds", "ls").stdout == "GITHUB_TOKEN\n"
    assert provider.live_tokens()[CANARY] == ["items.read", "items.write"]


def test_connect_opens_the_system_browser_when_there_is_one(cli, provider):
    provider.issue_access_token(CANARY)
    cli.env["BROWSER"] = f"{sys.executable} {HERE / 'play_browser.py'} %s"
    with connecting(cli, "github", "--json") as flow:
        status, shown = flow.finish()
    assert status == 0, shown
    assert json.loads(shown[: shown.index("}\n") + 1])["credential"] == "GITHUB_TOKEN"
    assert "Opened your browser" in shown and CANARY not in shown
    assert kept(cli)["values"] == {"GITHUB_TOKEN": CANARY}


def test_a_provider_not_built_in_comes_from_the_environment_and_goes_to_the_keyring(
    cli, provider, tmp_path
):
    ring = tmp_path / "keyring.json"
    cli.env.update(
        UNDOABLE_CONNECT_ITEMS_AUTHORIZE_URL=provider.authorize_url,
        UNDOABLE_CONNECT_ITEMS_TOKEN_URL=provider.token_url,
        UNDOABLE_CONNECT_ITEMS_SCOPES="items.read",
        PYTHON_KEYRING_BACKEND="file_keyring.FileKeyring",
        PYTHONPATH=f"{cli.env['PYTHONPATH']}:{HERE}",
        TEST_KEYRING_FILE=str(ring),
    )
    provider.issue_access_token(CANARY)
    status, shown = signed_in(cli, "items", "--client-id", CLIENT_ID, "--as", "ITEMS_KEY")
    assert status == 0, shown
    assert json.loads(ring.read_text()) == {"undoable/ITEMS_KEY": CANARY}
    assert CANARY not in json.dumps(kept(cli)) and kept(cli)["names"] == ["ITEMS_KEY"]
    assert provider.live_tokens()[CANARY] == ["items.read"]


def test_a_provider_without_its_endpoints_or_client_id_names_the_settings(cli):
    done = cli.run("connect", "items")
    assert done.returncode == 1
    assert "UNDOABLE_CONNECT_ITEMS_AUTHORIZE_URL" in done.stderr
    assert "UNDOABLE_CONNECT_ITEMS_CLIENT_ID" in done.stderr


def test_a_refusal_at_the_provider_is_reported_and_keeps_nothing(cli, provider):
    provider.next_error = "access_denied"
    status, shown = signed_in(cli, "github")
    assert status == 1 and "refused the sign-in" in shown
    assert kept(cli) == {}


# -- state: an answer to another sign-in (a forged redirect) is refused ------------------


def with_state(location: str, state: str) -> str:
    url = urlparse(location)
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    return url._replace(query=urlencode({**query, "state": state})).geturl()


def forged_redirect(cli: Cli, patch: str = "") -> tuple[int, str]:
    with connecting(cli, "github", "--no-browser", patch=patch) as flow:
        httpx.get(with_state(flow.redirect(), "forged-state"), timeout=30)
        return flow.finish()


def test_deny_a_redirect_with_another_state_is_refused_before_the_code_is_used(cli, provider):
    status, shown = forged_redirect(cli)
    assert status == 1 and "state" in shown
    assert provider.token_requests == 0 and kept(cli) == {}


@pytest.mark.sabotage
def test_sabotage_without_the_state_check_a_forged_redirect_is_taken(cli, provider):
    status, shown = forged_redirect(cli, patch=ANY_STATE)
    assert status == 0, shown
    assert provider.token_requests == 1 and "GITHUB_TOKEN" in kept(cli)["values"]


# -- PKCE: a code seen by another program is useless without this process's verifier ------


def intercepted(cli: Cli, provider: FakeOAuthProvider, patch: str = "") -> httpx.Response:
    """Another program reads the code on its way back and redeems it first."""
    with connecting(cli, "github", "--no-browser", patch=patch) as flow:
        location = flow.redirect()
        code = parse_qs(urlparse(location).query)["code"][0]
        form = {"grant_type": "authorization_code", "code": code, "client_id": CLIENT_ID,
                "redirect_uri": location.split("?")[0]}  # fmt: skip
        stolen = httpx.post(provider.token_url, data=form, timeout=30)
        httpx.get(location, timeout=30)
        flow.finish()
    return stolen


def test_deny_an_intercepted_code_is_refused_without_the_verifier(cli, provider):
    stolen = intercepted(cli, provider)
    assert stolen.status_code == 400 and "PKCE" in stolen.json()["error_description"]


@pytest.mark.sabotage
def test_sabotage_without_pkce_an_intercepted_code_gives_a_token(cli, provider):
    provider.pkce_required = False  # a provider that lets a client without PKCE through
    stolen = intercepted(cli, provider, patch=NO_PKCE)
    assert stolen.status_code == 200 and stolen.json()["access_token"]


@pytest.mark.sabotage
def test_sabotage_without_the_verifier_the_provider_refuses_the_code(cli, provider):
    status, shown = signed_in(cli, "github", patch=NO_VERIFIER)
    assert status == 1 and "PKCE verifier mismatch" in shown
    assert kept(cli) == {}


# -- the loopback listener: 127.0.0.1 alone, one redirect, then closed -------------------


def listener_seen(cli: Cli, provider: FakeOAuthProvider, patch: str = "") -> tuple[bool, bool]:
    """(reachable on another address while it waits, still open after the redirect)."""
    provider.token_gate = threading.Event()
    with connecting(cli, "github", "--no-browser", patch=patch) as flow:
        location = flow.redirect()
        elsewhere = not refused_at(flow.port, "127.0.0.2")
        httpx.get(location, timeout=30)
        assert provider.token_asked.wait(timeout=30)  # past the listener, in the exchange
        still_open = not refused_at(flow.port)
        provider.token_gate.set()
        status, shown = flow.finish()
    assert status == 0, shown
    return elsewhere, still_open


def test_deny_the_listener_is_on_127_0_0_1_alone_and_closes_after_one_redirect(cli, provider):
    assert listener_seen(cli, provider) == (False, False)


@pytest.mark.sabotage
def test_sabotage_a_listener_on_every_address_is_reachable_elsewhere(cli, provider):
    assert listener_seen(cli, provider, patch=ALL_ADDRESSES)[0] is True


@pytest.mark.sabotage
def test_sabotage_a_listener_never_closed_still_answers_after_the_redirect(cli, provider):
    assert listener_seen(cli, provider, patch=NEVER_CLOSED)[1] is True
