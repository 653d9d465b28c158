"""Share pages: create (owner), read (anyone with the link), revoke (owner), fork (signed in)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.authed import AuthedHttpRequest
from webapp.queries.selectors import get_query_for_user
from webapp.runs.images import image_response
from webapp.shares import services
from webapp.shares.selectors import (
    get_live_share,
    get_share_for_user,
    get_share_image,
    share_images,
    share_list_for_user,
)


@login_required
@require_POST
def share_create_view(request: AuthedHttpRequest, query_id: int) -> HttpResponse:
    query = get_query_for_user(request.user, query_id)
    share = services.share_create(
        owner=request.user, query=query, include_output=request.POST.get("include_output") == "on"
    )
    messages.success(request, "Share link created. Anyone with it can read this snapshot.")
    return redirect("shares:detail", token=share.token)


@require_GET
def share_detail_view(request: HttpRequest, token: str) -> HttpResponse:
    share = get_live_share(token)
    response = render(
        request,
        "shares/detail.html",
        {
            "share": share,
            "is_owner": share.owner_id == request.user.pk,
            "images": share_images(share),
        },
    )
    # The token is in the URL: keep it out of other sites' Referer headers and of shared caches.
    # Not "no-referrer": Chromium then sends `Origin: null` with the page's own forms (Fork,
    # Revoke) and Django's CSRF check rightly refuses them.
    response["Referrer-Policy"] = "same-origin"
    response["Cache-Control"] = "private, no-store"
    response["X-Robots-Tag"] = "noindex"
    return response


@login_required
@require_GET
def share_list_view(request: AuthedHttpRequest) -> HttpResponse:
    return render(request, "shares/list.html", {"shares": share_list_for_user(request.user)})


@login_required
@require_POST
def share_revoke_view(request: HttpRequest, token: str) -> HttpResponse:
    services.share_revoke(share=get_share_for_user(request.user, token))
    messages.success(request, "The link is revoked; it no longer opens.")
    return redirect("shares:list")


@require_POST
def share_fork_view(request: HttpRequest, token: str) -> HttpResponse:
    share = get_live_share(token)
    if not request.user.is_authenticated:
        return redirect_to_login(reverse("shares:detail", kwargs={"token": token}))
    query = services.share_fork(user=request.user, share=share)
    messages.success(request, "Forked into your history. Add your own credentials to run it.")
    return redirect("queries:query-detail", query_id=query.pk)


@require_GET
def share_image_view(request: HttpRequest, token: str, position: int) -> HttpResponse:
    """An image of the shared run, for anyone with the link, while the link is live."""
    response = image_response(
        get_share_image(get_live_share(token), position), cache_control="private, no-store"
    )
    response["X-Robots-Tag"] = "noindex"
    return response
