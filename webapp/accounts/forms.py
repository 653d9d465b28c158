"""Local account forms."""

from __future__ import annotations

from django.contrib.auth.forms import UserCreationForm


class SignupForm(UserCreationForm):
    """Username and password; Django's password validators apply."""
