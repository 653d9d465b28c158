"""A web run's images: stored when its result is recorded, listed with its final status, served
as bytes that can never act as a page.

The executor already decided what counts as an image (executor/images.py: capped, typed by
its own bytes). What is left to the web side is that an SVG, which may hold a <script>, never
runs one: the page shows images only as <img> (scripts never run there), and the response
that serves the bytes carries a sandboxing CSP, so opening an image's URL directly, in its
own tab, runs nothing either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.http import Http404, HttpResponse
from django.urls import reverse

from webapp.executor_glue import Image
from webapp.runs.models import Run, RunImage
from webapp.runs.payloads import ImagePayload

# `sandbox` alone gives the document an opaque origin with scripts off; `default-src 'none'`
# also keeps it from loading anything; inline styles are what an SVG's own styling needs.
IMAGE_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'"


def run_images_store(*, run: Run, images: Iterable[Image]) -> None:
    """Keep the images the host accepted for this run, numbered from 1 in the order given."""
    RunImage.objects.bulk_create(
        RunImage(run=run, position=n, name=image.name, mime=image.mime, data=image.data)
        for n, image in enumerate(images, start=1)
    )


def run_image_payloads(run: Run, *, url: Callable[[int], str] | None = None) -> list[ImagePayload]:
    """What the page needs to show a run's images; `url(position)` for another route (a share).

    Only a finished run has images (they are stored with its result), so a running one costs
    no query.
    """
    if not run.is_final:
        return []
    url = url or (lambda n: reverse("runs:run-image", args=[run.pk, n]))
    rows = RunImage.objects.filter(run=run).values_list("position", "name", "mime")
    return [ImagePayload(url=url(n), name=name, mime=mime) for n, name, mime in rows]


def run_image_payloads_for(runs: list[Run]) -> dict[int, list[ImagePayload]]:
    """run_image_payloads of each of `runs` (by run id), in one query however many."""
    found: dict[int, list[ImagePayload]] = {run.pk: [] for run in runs}
    rows = RunImage.objects.filter(run__in=[run for run in runs if run.is_final]).values_list(
        "run_id", "position", "name", "mime"
    )
    for run_id, n, name, mime in rows:
        url = reverse("runs:run-image", args=[run_id, n])
        found[run_id].append(ImagePayload(url=url, name=name, mime=mime))
    return found


def get_run_image(run: Run, position: int) -> RunImage:
    """Image `position` of a run the caller may already see, or Http404."""
    try:
        return RunImage.objects.get(run=run, position=position)
    except RunImage.DoesNotExist:
        raise Http404("No such image") from None


def image_response(image: RunImage, *, cache_control: str) -> HttpResponse:
    """The image's bytes under its stored type, never sniffed into something else, never able
    to run a script even when opened on its own."""
    response = HttpResponse(bytes(image.data), content_type=image.mime)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = IMAGE_CSP
    response["Content-Disposition"] = "inline"
    response["Cache-Control"] = cache_control
    return response
