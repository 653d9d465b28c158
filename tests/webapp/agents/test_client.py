"""The Python client and its agent glue against a live server; replit-code-exec compatibility."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import requests

# The client is its own package (clients/python); the tests use it from the source tree.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "clients" / "python" / "src"))
from undoable_client import ApiError, Client  # noqa: E402
from undoable_client.tools import CodeExecTool, strip_code_fences, tool_schema  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("sessions")]


@pytest.fixture
def client(app_server, owner) -> Client:
    return Client(app_server, owner.token)


def completion_with_code(code: str) -> dict:
    arguments = {"code": code}
    import json

    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "execute_python", "arguments": json.dumps(arguments)},
    }
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}


def test_the_client_runs_code_and_reads_json(client):
    result = client.exec("print(sum(range(10)))")
    assert (result.stdout, result.exit_code, result.ok) == ("45\n", 0, True)


def test_the_client_passes_files_and_interpreter_mode(client):
    result = client.exec("open('n.txt').read() * 2", files={"n.txt": "ab"}, interpreter_mode=True)
    assert result.stdout == "'abab'\n"


def test_the_client_raises_api_errors_with_the_servers_message(app_server, client):
    with pytest.raises(ApiError) as bad:
        client.exec("1", language="cobol")
    assert bad.value.status == 400 and "language" in bad.value.message
    with pytest.raises(ApiError) as unauthorised:
        Client(app_server, "udb_wrong").exec("1")
    assert unauthorised.value.status == 401


def test_a_client_session_keeps_state_and_files_and_is_deleted_on_exit(client):
    with client.session() as session:
        session.exec("counter = 41")
        session.write_file("raw.bin", b"\x00\x01\xfe\xff")
        assert session.exec("counter + 1").stdout == "42\n"
        assert session.exec("open('raw.bin','rb').read()").stdout == "b'\\x00\\x01\\xfe\\xff'\n"
        session.bash("printf 'é' > out.txt")
        assert session.read_file("out.txt") == "é".encode()
        assert {e["name"] for e in session.list_files()} == {"raw.bin", "out.txt"}
        session.delete_file("raw.bin")
        assert [e["name"] for e in session.list_files()] == ["out.txt"]
    with pytest.raises(ApiError) as gone:
        session.exec("counter")
    assert gone.value.status == 404


def test_the_tool_schema_is_an_openai_function_with_a_code_argument():
    schema = tool_schema()
    assert schema["type"] == "function"
    assert schema["function"]["parameters"]["required"] == ["code"]


@pytest.mark.parametrize(
    "code",
    [
        "print(6*7)",
        "```python\nprint(6*7)\n```",
        "```\nprint(6*7)\n```",
        "\n```py\nprint(6*7)```\n",
    ],
)
def test_from_response_runs_the_tool_calls_code_without_fences(client, code):
    assert CodeExecTool(client).from_response(completion_with_code(code)) == "42\n"


def test_from_response_reports_a_failure_to_the_model(client):
    output = CodeExecTool(client).from_response(completion_with_code("raise ValueError('bad')"))
    assert "ValueError: bad" in output and "[exit code 1]" in output


def test_strip_code_fences_leaves_plain_code_alone():
    assert strip_code_fences("x = '```'\nprint(x)") == "x = '```'\nprint(x)"


def test_a_replit_code_exec_style_call_gets_plain_text(app_server, owner):
    # Exactly what replit_code_exec.code_exec() sends: JSON body, bearer token, reads .text.
    response = requests.post(
        app_server + "/api/v1/exec",
        json={
            "code": "import sys\nprint(1+1)\nprint('e', file=sys.stderr)",
            "files": {"a": "b"},
            "interpreter_mode": True,
            "strace": True,
        },
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + owner.token},
        timeout=60,
    )
    assert response.text == "2\ne\n"


def test_the_real_replit_code_exec_client_works_unchanged(app_server, owner, monkeypatch):
    # The package imports `instructor` (for an OpenAI helper we do not use) at import time;
    # its pinned version conflicts with our openai SDK, so only that import is stubbed.
    placeholder = types.ModuleType("instructor")
    placeholder.openai_function = lambda function: function  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "instructor", placeholder)
    replit_code_exec = pytest.importorskip("replit_code_exec")
    text = replit_code_exec.code_exec(
        app_server + "/api/v1/exec",
        owner.token,
        "x = 20\nx + 22",
        files={"in.txt": "unused"},
        interpreter_mode=True,
    )
    assert text == "42\n"


def test_the_client_decodes_a_runs_images(client):
    result = client.exec("import matplotlib.pyplot as plt\nplt.plot([1, 2])")
    assert [(i.name, i.mime) for i in result.images] == [("figure-1.png", "image/png")]
    assert result.images[0].data.startswith(b"\x89PNG")
