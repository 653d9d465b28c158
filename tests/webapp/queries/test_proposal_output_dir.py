"""Code that saves pictures reads UNDOABLE_OUTPUT_DIR, which the sandbox sets itself: a proposal
never asks the person for it as a credential (the run would stop before drawing anything)."""

from __future__ import annotations

from tests.fakes.llm_server import content, tool_call
from webapp import llm

SAVES_A_PICTURE = (
    "import os\nout = os.environ['UNDOABLE_OUTPUT_DIR']\n"
    "token = os.environ.get('CHART_API_KEY')\nopen(out + '/a.svg', 'w').write('<svg/>')\n"
)


def test_a_tool_answer_without_credentials_does_not_ask_for_the_output_dir(fake_llm) -> None:
    fake_llm.script(tool_call({"forward_code": SAVES_A_PICTURE, "credentials": []}))
    proposal = llm.propose_action(prompt="draw a chart")
    assert proposal.credentials == ["CHART_API_KEY"]


def test_a_tool_answer_listing_the_output_dir_drops_it(fake_llm) -> None:
    answer = {"forward_code": SAVES_A_PICTURE, "credentials": ["UNDOABLE_OUTPUT_DIR"]}
    fake_llm.script(tool_call(answer))
    assert llm.propose_action(prompt="draw a chart").credentials == ["CHART_API_KEY"]


def test_a_fenced_answer_does_not_ask_for_the_output_dir(fake_llm) -> None:
    fake_llm.script(content(f"Draws it.\n```python\n{SAVES_A_PICTURE}```\n"))
    assert llm.propose_action(prompt="draw a chart").credentials == ["CHART_API_KEY"]
