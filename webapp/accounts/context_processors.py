from django.conf import settings
from django.http import HttpRequest


def login_options(request: HttpRequest) -> dict[str, bool]:
    return {
        "google_login_enabled": bool(
            settings.SOCIAL_AUTH_GOOGLE_OAUTH2_KEY and settings.SOCIAL_AUTH_GOOGLE_OAUTH2_SECRET
        ),
        "accounts_allow_signup": settings.UNDOABLE_ALLOW_SIGNUP,
        "llm_configured": bool(settings.LLM_BASE_URL),
    }
