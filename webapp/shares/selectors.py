"""Share lookups: public by token (live links only), or the owner's own by token."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.http import Http404
from django.urls import reverse

from webapp.runs.images import get_run_image, run_image_payloads
from webapp.runs.models import RunImage
from webapp.runs.payloads import ImagePayload
from webapp.shares.models import Share


def get_live_share(token: str) -> Share:
    """The share behind a link, for anyone; a revoked or unknown link is Http404."""
    try:
        return Share.objects.get(token=token, revoked_at__isnull=True)
    except Share.DoesNotExist:
        raise Http404("No such link") from None


def get_share_for_user(user: User | AnonymousUser, token: str) -> Share:
    """The user's own live share, or Http404 (strangers cannot tell it exists)."""
    if not user.is_authenticated:
        raise Http404("No such link")
    try:
        return Share.objects.get(token=token, owner=user, revoked_at__isnull=True)
    except Share.DoesNotExist:
        raise Http404("No such link") from None


def share_list_for_user(user: User) -> QuerySet[Share]:
    return Share.objects.filter(owner=user, revoked_at__isnull=True).select_related("query")


def share_images(share: Share) -> list[ImagePayload]:
    """The shared run's images, at the share's own URLs; none unless output is included."""
    run = share.output_run if share.include_output else None
    if run is None:
        return []
    return run_image_payloads(
        run, url=lambda n: reverse("shares:image", kwargs={"token": share.token, "position": n})
    )


def get_share_image(share: Share, position: int) -> RunImage:
    """Image `position` of the run a live share includes the output of, or Http404."""
    run = share.output_run if share.include_output else None
    if run is None:
        raise Http404("No such image")
    return get_run_image(run, position)
