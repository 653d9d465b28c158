"""POST /api/v1/exec: protocol (text vs JSON, files, interpreter mode) and every error status."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.webapp.agents.conftest import asgi_request
from webapp.executor_glue import reset_executor

pytestmark = pytest.mark.django_db

EXEC = "/api/v1/exec"


def test_it_answers_plain_text_of_everything_printed_by_default(owner):
    response = owner.post(EXEC, {"code": "import sys\nprint('out')\nprint('err', file=sys.stderr)"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content.decode() == "out\nerr\n"
    assert response["X-Exit-Code"] == "0"


def test_it_answers_json_when_asked(owner):
    response = owner.post(
        EXEC, {"code": "import sys; print('a'); sys.exit(3)"}, accept="application/json"
    )
    body = response.json()
    assert response.status_code == 200
    assert set(body) == {
        "stdout",
        "stderr",
        "exit_code",
        "signal",
        "limit",
        "timed_out",
        "oom_killed",
        "truncated",
        "duration_ms",
        "images",
        "image_notes",
    }
    assert (body["stdout"], body["exit_code"], body["timed_out"]) == ("a\n", 3, False)


def test_it_writes_files_into_the_working_directory(owner):
    body = {"code": "print(open('data/in.txt').read().upper())", "files": {"data/in.txt": "hé"}}
    response = owner.post(EXEC, body)
    assert response.content.decode() == "HÉ\n"


def test_interpreter_mode_echoes_bare_expressions(owner):
    response = owner.post(EXEC, {"code": "x = 6\nx * 7\nNone\n'done'", "interpreter_mode": True})
    assert response.content.decode() == "42\n'done'\n"


def test_without_interpreter_mode_bare_expressions_print_nothing(owner):
    response = owner.post(EXEC, {"code": "6 * 7"})
    assert response.content.decode() == ""


def test_it_runs_bash_and_feeds_stdin(owner):
    body = {"code": 'read line; echo "got $line"', "language": "bash", "stdin": "hello\n"}
    assert owner.post(EXEC, body).content.decode() == "got hello\n"


def test_a_slow_program_times_out_within_the_requested_limit(owner):
    response = owner.post(
        EXEC, {"code": "import time; time.sleep(30)", "timeout_s": 1}, accept="application/json"
    )
    assert response.json()["timed_out"] is True


def test_a_cpu_loop_at_its_limit_is_named_cpu_time_every_time(owner):
    body = {"code": "while True: pass", "timeout_s": 2}
    seen = []
    for _ in range(20):
        reply = owner.post(EXEC, body, accept="application/json").json()
        seen.append((reply["limit"], reply["timed_out"], reply["exit_code"]))
    assert seen == [("cpu_time", True, None)] * 20


def test_a_sleeper_is_named_wall_time(owner):
    body = {"code": "import time; time.sleep(30)", "timeout_s": 1}
    reply = owner.post(EXEC, body, accept="application/json").json()
    assert (reply["limit"], reply["timed_out"], reply["signal"]) == ("wall_time", True, 15)


def test_strace_is_accepted_and_ignored(owner):
    assert owner.post(EXEC, {"code": "print(1)", "strace": True}).content == b"1\n"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"code": "print(1)\xff"}', "not valid UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"files": {}}', "code is required"),
        (b'{"code": 5}', "code"),
        (b'{"code": "1", "files": {"a": 1}}', "files.a"),
        (b'{"code": "1", "interpreter_mode": "yes"}', "interpreter_mode"),
        (b'{"code": "1", "language": "ruby"}', "language"),
        (b'{"code": "1", "timeout_s": 0}', "timeout_s"),
        (b'{"code": "1", "timeout_s": 100000}', "timeout_s"),
        (b'{"code": "1", "timeout_s": true}', "timeout_s"),
        (b'{"code": "1", "files": {"../evil": "x"}}', "invalid file name"),
        (b'{"code": "1", "files": {"/etc/passwd": "x"}}', "invalid file name"),
        (b'{"code": "1", "files": {"a/../../b": "x"}}', "invalid file name"),
        # Until these were checked here, the first was a 500 and the others reached the
        # sandbox, which could not write them: a run failing with exit code 126.
        (b'{"code": "1", "files": {".": "x"}}', "invalid file name"),
        (b'{"code": "1", "files": {"\\ud800": "x"}}', "not UTF-8"),
        (b'{"code": "1", "files": {"a": "x", "a/b": "y"}}', "both a file and a folder"),
        (b'{"code": "1", "files": {"a/": "x"}}', "write it 'a'"),
        (b'{"code": "1", "files": {"a": "ok\\udc80"}}', "files['a'] is not UTF-8"),
        (b'{"code": "1", "stdin": "\\ud800"}', "stdin is not UTF-8: a lone surrogate at 0"),
    ],
)
def test_a_malformed_request_is_a_400_and_runs_nothing(owner, raw, message):
    response = owner.post(EXEC, None, raw=raw)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert message in response.json()["error"]
    assert "X-Exit-Code" not in response


@override_settings(AGENTS_MAX_CODE_BYTES=1000, AGENTS_MAX_FILES_BYTES=2000)
@pytest.mark.parametrize(
    "body",
    [
        {"code": "#" * 1001},
        {"code": "1", "files": {"a.txt": "x" * 1500, "b.txt": "y" * 600}},
    ],
)
def test_oversized_code_or_files_is_a_413(owner, body):
    response = owner.post(EXEC, body)
    assert response.status_code == 413
    assert "larger than" in response.json()["error"]


def test_a_body_with_files_and_stdin_at_their_caps_runs(owner):
    """2 MiB of files and 1 MiB of stdin: past Django's own 2.5 MiB, within the API's 4 MiB."""
    body = {
        "code": "import sys; print(len(open('f').read()), len(sys.stdin.read()))",
        "files": {"f": "x" * (2 * 1024 * 1024 - 1)},
        "stdin": "y" * (1024 * 1024 - 1),
    }
    response = owner.post(EXEC, body)
    assert (response.status_code, response.text) == (200, "2097151 1048575\n")


@override_settings(AGENTS_MAX_BODY_BYTES=100)
def test_an_oversized_body_is_a_413(owner):
    response = owner.post(EXEC, {"code": "#" * 200})
    assert response.status_code == 413


def test_a_missing_token_is_a_401(owner):
    headers = {"Content-Type": "application/json"}
    response = asgi_request("POST", EXEC, content=b'{"code": "print(1)"}', headers=headers)
    assert response.status_code == 401
    assert response.json() == {"error": "missing, invalid or revoked API token"}


def test_a_wrong_token_is_a_401(owner):
    owner.token = owner.token[:-2] + "xx"
    assert owner.post(EXEC, {"code": "print(1)"}).status_code == 401


def test_a_server_whose_sandbox_cannot_run_answers_503(owner, tmp_path):
    with override_settings(EXECUTOR_ROOTFS=tmp_path, EXECUTOR_WARM_POOL_SIZE=0):
        reset_executor()
        try:
            response = owner.post(EXEC, {"code": "print(1)"})
        finally:
            reset_executor()
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {"error": "the sandbox is unavailable on this server"}


def test_the_docs_are_served_without_a_cdn(client):
    page = client.get("/api/docs")
    html = page.content.decode()
    assert page.status_code == 200
    assert "cdn" not in html.lower() and "https://" not in html
    assert "/static/ninja/swagger-ui-bundle.js" in html
    asset = client.get("/static/ninja/swagger-ui-bundle.js")
    assert asset.status_code == 200
    assert len(b"".join(asset.streaming_content)) > 100_000
    schema = client.get("/api/openapi.json").json()
    assert "/api/v1/exec" in schema["paths"] and "/api/v1/sessions" in schema["paths"]


def refs_in(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [ref for value in node.values() for ref in refs_in(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in refs_in(value)]
    return []


def test_every_reference_in_the_schema_has_its_component(client):
    schema = client.get("/api/openapi.json").json()
    assert schema["components"]["schemas"]["ExecIn"]["required"] == ["code"]
    components = schema["components"]["schemas"]
    assert all(ref.removeprefix("#/components/schemas/") in components for ref in refs_in(schema))


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_another_method_than_post_is_a_405_in_the_apis_shape(owner, method):
    response = asgi_request(method, EXEC, headers={"Authorization": f"Bearer {owner.token}"})
    assert (response.status_code, response["Allow"]) == (405, "POST")
    assert response.json() == {"error": f"{method} is not allowed here; use POST"}
