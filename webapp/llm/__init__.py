"""Ask an OpenAI-compatible Chat Completions endpoint for code (DESIGN.md "LLM proposal").

`propose_action(prompt=...)` returns a Proposal (forward and reverse code, explanation, the
credential names and hosts the code uses). `propose_fix(code=..., error_output=...)` returns the
corrected program of a failed run. The model is forced to call our tool; endpoints that reject
tools get the same request again asking for fenced code blocks. Every failure is an LLMError whose
message can be shown to the person as is.
"""

from webapp.llm.client import Fix, Proposal, llm_configured, propose_action, propose_fix
from webapp.llm.errors import LLMBadAnswer, LLMError, LLMNotConfigured, LLMUnavailable

__all__ = [
    "Fix",
    "LLMBadAnswer",
    "LLMError",
    "LLMNotConfigured",
    "LLMUnavailable",
    "Proposal",
    "llm_configured",
    "propose_action",
    "propose_fix",
]
