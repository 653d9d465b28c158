"""The CodeAct loop against a real local OpenAI-compatible server scripted to err, then fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from openai import OpenAI

from tests.fakes.llm_server import FakeLLMServer, content

# The client is its own package (clients/python); the tests use it from the source tree.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "clients" / "python" / "src"))
from undoable_client import Client  # noqa: E402
from undoable_client.codeact import openai_llm, solve, truncate_observation  # noqa: E402

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("sessions")]

BUGGY = "Let me compute it.\n```python\nnumbers = list(range(1, 101))\nprint(totl(numbers))\n```"
FIXED = "Typo, fixing it.\n```python\ntotal = sum(numbers)\nprint(total)\n```"


def test_the_model_sees_its_traceback_fixes_the_code_and_answers(app_server, owner):
    with FakeLLMServer() as llm:
        llm.script(content(BUGGY), content(FIXED), content("The sum is 5050."))
        model = openai_llm(OpenAI(base_url=llm.base_url, api_key="test"), "fake-model")
        result = solve(
            "Add the numbers 1 to 100.",
            model,
            max_turns=5,
            client=Client(app_server, owner.token),
        )
        requests = llm.requests
    assert result.answer == "The sum is 5050."
    assert result.turns == 3
    second_turn = requests[1]["messages"][-1]["content"]
    assert "NameError: name 'totl' is not defined" in second_turn
    # The fix reused `numbers` from the failed turn: one session for the whole task.
    assert requests[2]["messages"][-1]["content"] == "Observation:\n5050\n"


def test_the_loop_stops_after_max_turns(app_server, owner):
    with FakeLLMServer() as llm:
        llm.script(content("```python\nprint(1)\n```"), content("```python\nprint(2)\n```"))
        model = openai_llm(OpenAI(base_url=llm.base_url, api_key="test"), "fake-model")
        result = solve("loop", model, max_turns=2, client=Client(app_server, owner.token))
    assert (result.answer, result.turns) == (None, 2)


def test_long_observations_keep_their_start_and_end():
    text = "START" + "x" * 10_000 + "Traceback: the end"
    cut = truncate_observation(text, limit=300)
    assert cut.startswith("START") and cut.endswith("Traceback: the end")
    assert "characters cut" in cut and len(cut) < 400
