"""The rest kind in real bwrap sandboxes: only allowlisted hosts, through the host's proxy."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.kinds import egress
from executor.kinds.egress import with_forward_output
from executor.kinds.sandbox import sandbox_host_uid
from executor.spec import RunSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
from slack_server import FakeSlackServer  # noqa: E402

TOKEN = "xoxb-kinds-test"


@pytest.fixture
def slack() -> Iterator[FakeSlackServer]:
    with FakeSlackServer(token=TOKEN) as server:
        yield server


def run_spec(backend, limits, place, spec, *, allow_private=True):
    """The same lifecycle the web app uses: prepared, run in a real sandbox, finished."""
    with egress.prepared(
        spec,
        limits=limits,
        control_base=place,
        uid=sandbox_host_uid(backend),
        allow_private=allow_private,
    ) as job:
        result = backend.run(job.spec, limits=job.limits, mounts=job.mounts)
        return result, job.finish(result)


def run(backend, limits, place, code, hosts, *, allow_private=True, env=None):
    spec = RunSpec(code=code, allowed_hosts=tuple(hosts), env=env or {})
    return run_spec(backend, limits, place, spec, allow_private=allow_private)


POST = """
import os, requests
r = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": "C1", "text": "a joke for Ana"})
print(r.text)
"""
DELETE = """
import json, os, requests
sent = json.loads(os.environ["FORWARD_OUTPUT"])
assert json.loads(open("forward_output.txt").read()) == sent
r = requests.post(os.environ["SLACK_URL"] + "/chat.delete",
                  headers={"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]},
                  json={"channel": sent["channel"], "ts": sent["ts"]})
print(r.json()["ok"])
"""


def test_the_reverse_deletes_the_posted_message_using_the_forward_output(
    backend, limits, place, slack
):
    hosts = [f"127.0.0.1:{slack.port}"]
    env = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": TOKEN}
    forward, refused = run(backend, limits, place, POST, hosts, env=env)
    assert forward.ok, forward.stderr
    assert refused == []
    posted = slack.wait_for_message(lambda m: m["text"] == "a joke for Ana", timeout_s=5)
    assert json.loads(forward.stdout)["ts"] == posted["ts"]
    spec = with_forward_output(
        RunSpec(code=DELETE, env=env, allowed_hosts=tuple(hosts)), forward.stdout
    )
    reverse, _ = run_spec(backend, limits, place, spec)
    assert reverse.stdout == "True\n", reverse.stderr
    assert slack.wait_for_deleted(posted["ts"], timeout_s=5)["text"] == "a joke for Ana"
    assert slack.messages() == []


PROBE = """
import requests
for url in URLS:
    try:
        r = requests.get(url, timeout=10)
        print(url, r.status_code)
    except requests.exceptions.ProxyError:
        print(url, "proxy-refused")
"""


def test_an_unlisted_host_and_the_hosts_redis_are_refused(backend, limits, place, slack):
    urls = [
        "http://example.com/",
        "https://example.com/",
        "http://127.0.0.1:6379/",
        "http://2130706433:6379/",
        f"http://[::ffff:127.0.0.1]:{slack.port}/api",
        f"http://user@127.0.0.1:{slack.port}@127.0.0.1:6379/",
    ]
    code = f"URLS = {urls!r}\n{PROBE}"
    result, refused = run(backend, limits, place, code, [f"127.0.0.1:{slack.port}"])
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == [
        "http://example.com/ 403",
        "https://example.com/ proxy-refused",
        "http://127.0.0.1:6379/ 403",
        "http://2130706433:6379/ 403",
        f"http://[::ffff:127.0.0.1]:{slack.port}/api 403",
        f"http://user@127.0.0.1:{slack.port}@127.0.0.1:6379/ 403",
    ]
    assert len(refused) == 6
    assert slack.calls() == []


def test_internal_addresses_are_refused_even_when_listed_without_the_setting(
    backend, limits, place, slack
):
    urls = ["http://127.0.0.1:6379/", f"http://localhost:{slack.port}/api/x"]
    hosts = ["127.0.0.1:6379", f"localhost:{slack.port}"]
    code = f"URLS = {urls!r}\n{PROBE}"
    result, refused = run(backend, limits, place, code, hosts, allow_private=False)
    assert result.stdout.splitlines() == [f"{url} 403" for url in urls]
    assert all("internal address" in why for why in refused)
    assert slack.calls() == []


def test_a_raw_socket_has_no_route_out(backend, limits, place, slack):
    code = (
        "import socket\n"
        f"for addr in [('127.0.0.1', 6379), ('127.0.0.1', {slack.port}), ('10.0.0.1', 80)]:\n"
        "    try:\n"
        "        socket.create_connection(addr, timeout=5)\n"
        "        print('connected', addr)\n"
        "    except OSError as exc:\n"
        "        print('blocked', exc.errno)\n"
    )
    result, _ = run(backend, limits, place, code, [f"127.0.0.1:{slack.port}"])
    assert result.ok, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["blocked"] * 3
    assert slack.calls() == []


BIG_BOTH_WAYS = """
import http.client, json, os, requests
auth = {"Authorization": "Bearer " + os.environ["SLACK_TOKEN"]}
text = "0123456789" * 300_000
posted = requests.post(os.environ["SLACK_URL"] + "/chat.postMessage", headers=auth,
                       json={"channel": "C1", "text": text})
print(posted.json()["ok"])
tunnel = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
tunnel.set_tunnel("127.0.0.1", int(os.environ["SLACK_PORT"]))
tunnel.request("GET", "/api/conversations.history?channel=C1", headers=auth)
history = json.loads(tunnel.getresponse().read())
print(history["messages"][0]["text"] == text)
"""


def test_three_megabytes_go_up_through_the_proxy_and_back_through_a_connect_tunnel(
    backend, limits, place, slack
):
    env = {"SLACK_URL": slack.base_url, "SLACK_TOKEN": TOKEN, "SLACK_PORT": str(slack.port)}
    result, refused = run(
        backend, limits, place, BIG_BOTH_WAYS, [f"127.0.0.1:{slack.port}"], env=env
    )
    assert (result.stdout, refused) == ("True\nTrue\n", []), result.stderr
    assert len(slack.messages()[0]["text"]) == 3_000_000
