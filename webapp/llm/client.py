"""The openai SDK client and the two questions we ask it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import openai
from django.conf import settings

from webapp.llm import parsing, prompts
from webapp.llm.errors import LLMBadAnswer, LLMNotConfigured, LLMUnavailable

logger = logging.getLogger(__name__)

NOT_CONFIGURED = (
    "No LLM is configured. Set LLM_BASE_URL (any OpenAI-compatible endpoint, e.g. "
    "https://api.openai.com/v1 or http://127.0.0.1:11434/v1 for Ollama), LLM_API_KEY and "
    "LLM_MODEL, then restart. You can still write the code by hand."
)


@dataclass(frozen=True)
class Proposal:
    forward_code: str
    reverse_code: str
    explanation: str
    credentials: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    reversible: bool = True
    # A program that exits 0 once the effect is gone (rest; run after the reverse program).
    probe_code: str = ""
    # {credential: [scope]} the code needs from a connected service (not yet validated).
    scopes: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Fix:
    code: str
    explanation: str


def llm_configured() -> bool:
    return bool(settings.LLM_BASE_URL and settings.LLM_MODEL)


def _client() -> openai.OpenAI:
    if not llm_configured():
        raise LLMNotConfigured(NOT_CONFIGURED)
    return openai.OpenAI(
        base_url=settings.LLM_BASE_URL,
        # Local servers (Ollama, llama.cpp) take no key, but the SDK insists on one.
        api_key=settings.LLM_API_KEY or "not-needed",
        timeout=settings.LLM_TIMEOUT_S,
        # One attempt: the person sees the error at once and may press the button again.
        max_retries=0,
    )


def _complete(messages: list[Any], tool: dict[str, Any] | None) -> Any:
    """One chat completion; maps every transport failure to an LLMError with plain words."""
    client = _client()
    options: dict[str, Any] = {}
    if tool is not None:
        options = {
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": tool["function"]["name"]}},
        }
    try:
        return client.chat.completions.create(
            model=settings.LLM_MODEL, messages=messages, **options
        )
    except openai.APITimeoutError:
        raise LLMUnavailable(
            f"The LLM did not answer within {settings.LLM_TIMEOUT_S:g} s. Try again, or raise "
            "LLM_TIMEOUT_S."
        ) from None
    except openai.APIConnectionError:
        raise LLMUnavailable(
            f"Could not reach the LLM at {settings.LLM_BASE_URL}. Is it running?"
        ) from None
    except openai.APIStatusError as exc:
        if tool is not None and exc.status_code in (400, 404, 422, 501):
            raise _ToolsRejected(exc.status_code) from None
        raise LLMUnavailable(
            f"The LLM endpoint answered with an error (HTTP {exc.status_code})."
        ) from None


class _ToolsRejected(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _ask(system: str, user: str, tool: dict[str, Any], fenced_hint: str) -> tuple[dict | None, str]:
    """Ask with the tool forced; fall back to plain content when the endpoint rejects tools.

    Returns (tool arguments or None, message content).
    """
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    try:
        response = _complete(messages, tool)
    except _ToolsRejected as rejected:
        logger.info(
            "llm endpoint rejected tools; asking for fenced code", extra={"status": rejected.status}
        )
        messages[0] = {"role": "system", "content": system + "\n" + fenced_hint}
        response = _complete(messages, None)
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError, TypeError):
        raise LLMBadAnswer("The LLM's answer had no message in it.") from None
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is not None and function.name == tool["function"]["name"]:
            return parsing.tool_arguments(function.arguments), message.content or ""
    return None, message.content or ""


def propose_action(
    *,
    prompt: str,
    kind: str = "python",
    credential_names: list[str] | None = None,
    connection_lines: list[str] | None = None,
    hosts: list[str] | None = None,
) -> Proposal:
    """Ask for forward and reverse code. Only credential names ever go to the model."""
    user = prompts.propose_user_message(
        prompt, kind, list(credential_names or []), connection_lines, hosts
    )
    args, content = _ask(prompts.PROPOSE_SYSTEM, user, prompts.PROPOSE_TOOL, prompts.FENCED_HINT)
    if args is not None:
        forward = parsing.required_text(args, "forward_code")
        reverse = parsing.optional_text(args, "reverse_code")
        reversible = args.get("reversible", True)
        proposal = Proposal(
            forward_code=forward,
            reverse_code=reverse + "\n" if reverse else "",
            explanation=parsing.optional_text(args, "explanation"),
            credentials=parsing.credential_names(args.get("credentials"))
            or parsing.names_used_in(forward + reverse),
            hosts=parsing.host_names(args.get("hosts")) or parsing.hosts_used_in(forward + reverse),
            reversible=reversible if isinstance(reversible, bool) else True,
            scopes=parsing.scope_needs(args.get("scopes")),
            probe_code=parsing.optional_text(args, "probe"),
        )
    else:
        proposal = _proposal_from_fences(content)
    logger.info("llm proposal received", extra={"tool_call": args is not None, "kind": kind})
    return proposal


def _proposal_from_fences(content: str) -> Proposal:
    blocks = parsing.fenced_blocks(content)
    if not blocks:
        raise LLMBadAnswer(
            "The LLM answered without any code. Rephrase the request, or write the code by hand."
        )
    forward = blocks[0][1].strip("\n") + "\n"
    reverse = blocks[1][1].strip("\n") + "\n" if len(blocks) > 1 else ""
    return Proposal(
        forward_code=forward,
        reverse_code=reverse,
        explanation=parsing.prose_outside_fences(content),
        credentials=parsing.names_used_in(forward + reverse),
        hosts=parsing.hosts_used_in(forward + reverse),
    )


def propose_fix(*, code: str, error_output: str, language: str = "python") -> Fix:
    """Ask for a corrected program. `error_output` must already be masked."""
    user = prompts.fix_user_message(code, error_output[-8000:], language)
    args, content = _ask(prompts.FIX_SYSTEM, user, prompts.FIX_TOOL, prompts.FIX_FENCED_HINT)
    if args is not None:
        return Fix(
            code=parsing.required_text(args, "code"),
            explanation=parsing.optional_text(args, "explanation"),
        )
    blocks = parsing.fenced_blocks(content)
    if not blocks:
        raise LLMBadAnswer("The LLM answered without a corrected program.")
    return Fix(
        code=blocks[0][1].strip("\n") + "\n", explanation=parsing.prose_outside_fences(content)
    )
