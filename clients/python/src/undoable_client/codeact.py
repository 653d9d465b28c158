"""A CodeAct loop: the model acts by writing Python, sees what it printed, and tries again.

    from undoable_client import Client
    from undoable_client.codeact import openai_llm, solve
    result = solve("What is the 30th prime?", openai_llm(OpenAI(...), "gpt-4o-mini"),
                   max_turns=6, client=Client(url, token))
    result.answer

Every code action of one task runs in ONE session, so variables and files carry over between
turns; each observation (output, or the traceback) goes back to the model as the next message.
A reply without a code block is the answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from undoable_client.client import Client
from undoable_client.tools import format_output

Message = dict[str, str]
LLM = Callable[[list[Message]], str]

SYSTEM_PROMPT = (
    "You solve tasks by writing Python. To act, reply with exactly one ```python code block; "
    "it runs in a persistent Python session (variables survive between blocks) and you will "
    "see what it printed, or its traceback. Print what you need to see. When you know the "
    "answer, reply with the answer only, with no code block."
)
_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


@dataclass
class SolveResult:
    answer: str | None  # None when the model ran out of turns
    turns: int
    messages: list[Message] = field(default_factory=list)


def extract_code(reply: str) -> str | None:
    """The first fenced code block of a reply, if any."""
    match = _CODE.search(reply)
    return match.group(1) if match else None


def truncate_observation(text: str, limit: int = 4000) -> str:
    """Keep the start and the end (where tracebacks say what went wrong), cut the middle."""
    if len(text) <= limit:
        return text
    head, tail = limit // 3, limit - limit // 3
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"


def solve(
    task: str,
    llm: LLM,
    max_turns: int = 10,
    *,
    client: Client,
    observation_limit: int = 4000,
    timeout_s: float | None = None,
) -> SolveResult:
    """Let `llm` solve `task` by running code in one session for at most `max_turns` replies."""
    messages: list[Message] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task},
    ]
    with client.session() as session:
        for turn in range(1, max_turns + 1):
            reply = llm(messages)
            messages.append({"role": "assistant", "content": reply})
            code = extract_code(reply)
            if code is None:
                return SolveResult(answer=reply.strip(), turns=turn, messages=messages)
            result = session.exec(code, timeout_s=timeout_s)
            observation = format_output(result) or "[no output]"
            messages.append(
                {
                    "role": "user",
                    "content": "Observation:\n"
                    + truncate_observation(observation, observation_limit),
                }
            )
    return SolveResult(answer=None, turns=max_turns, messages=messages)


def openai_llm(openai_client: Any, model: str, **options: Any) -> LLM:
    """Adapt an `openai.OpenAI` client (any OpenAI-compatible endpoint) to the LLM callable."""

    def call(messages: list[Message]) -> str:
        completion = openai_client.chat.completions.create(
            model=model, messages=messages, **options
        )
        return completion.choices[0].message.content or ""

    return call
