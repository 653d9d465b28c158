"""What can go wrong when asking the model; every message is fit to show on the page."""


class LLMError(Exception):
    """The proposal could not be made; str(exc) says why in plain words."""


class LLMNotConfigured(LLMError):
    """LLM_BASE_URL / LLM_API_KEY / LLM_MODEL are not set."""


class LLMUnavailable(LLMError):
    """The endpoint is down, slow, or answered with an HTTP error."""


class LLMBadAnswer(LLMError):
    """The endpoint answered, but not with something we can use."""
