"""Pictures (issue 16): a matplotlib figure a run leaves open is shown under the console, after a
reload and on a share with output, on a phone-wide page that does not scroll sideways and that
axe finds no serious fault in. An SVG with a script shows as a picture, and opened on its own
its script does not run: the served headers are what stop it (the sabotage strips them).

Real server, real sandbox (matplotlib in its root), real chromium; only the LLM is faked.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Locator, Page, Route, expect

from tests.browser.conftest import AppServer
from tests.browser.site import new_context
from tests.browser.test_accessibility import AXE, BLOCKING_IMPACTS, RUN_AXE, WCAG_TAGS
from tests.browser.test_layout import OVERFLOW_SCRIPT
from tests.fakes.llm_server import FakeLLMServer, tool_call

pytestmark = pytest.mark.browser

PLOT_PROPOSAL = {
    "forward_code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('rising')\n",
    "reverse_code": "print('nothing to undo')\n",
    "explanation": "Draws a rising line.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
# A picture whose script, if it ever ran, marks the document (and says so in the title).
SCRIPTED_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="60">'
    '<rect width="120" height="60" fill="teal"/>'
    "<script>document.documentElement.setAttribute('data-ran', 'yes');"
    "document.title = 'script ran';</script></svg>"
)
SVG_PROPOSAL = {
    "forward_code": (
        "import os\n"
        "out = os.environ['UNDOABLE_OUTPUT_DIR']\n"
        "os.makedirs(out, exist_ok=True)\n"
        f"open(out + '/badge.svg', 'w').write({SCRIPTED_SVG!r})\n"
        "print('drawn')\n"
    ),
    "reverse_code": "print('nothing to undo')\n",
    "explanation": "Draws a badge.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
FIGURE_ALT = re.compile(r"^Figure 1 from run #\d+: figure-1\.png$")


def phone_page(chromium: Browser, app_server: AppServer, *, signed_in: bool = True) -> Page:
    page = new_context(chromium, app_server, signed_in=signed_in, width=390).new_page()
    page.set_default_timeout(30_000)
    return page


def propose_and_run(page: Page, fake_llm_server: FakeLLMServer, prompt: str, proposal) -> None:
    fake_llm_server.script(tool_call(proposal))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill(prompt)
    page.locator("select[name=kind]").select_option("python")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("query-prompt")).to_have_text(prompt)
    page.get_by_test_id("run-forward").click()
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "succeeded")


def natural_width(img: Locator) -> int:
    """The decoded picture's own width: 0 (or a rejected decode) if the bytes are no image."""
    img.scroll_into_view_if_needed()  # loading="lazy": it loads once near the viewport
    return int(img.evaluate("img => img.decode().then(() => img.naturalWidth)"))


def assert_fits_and_passes_axe(page: Page, what: str) -> None:
    layout = page.evaluate(OVERFLOW_SCRIPT)
    assert layout["scrollWidth"] <= layout["innerWidth"], (what, layout)
    page.add_script_tag(path=str(AXE))
    violations = page.evaluate(RUN_AXE, WCAG_TAGS)
    assert not [v for v in violations if v["impact"] in BLOCKING_IMPACTS], (what, violations)


def test_a_matplotlib_figure_shows_under_the_console_after_a_reload_and_on_the_share(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer
) -> None:
    page = phone_page(chromium, app_server)
    try:
        propose_and_run(page, fake_llm_server, "plot a rising line", PLOT_PROPOSAL)
        figure = page.get_by_test_id("run-images").get_by_role("img")
        expect(figure).to_have_attribute("alt", FIGURE_ALT)
        expect(figure).to_be_visible()
        assert natural_width(figure) > 0
        assert_fits_and_passes_axe(page, "query page")

        page.reload()
        expect(figure).to_have_attribute("alt", FIGURE_ALT)
        assert natural_width(figure) > 0

        page.get_by_test_id("share-include-output").check()
        page.get_by_test_id("share-button").click()
        expect(page.get_by_test_id("share-output")).to_be_visible()
        share_url = page.url
    finally:
        page.context.close()

    visitor = phone_page(chromium, app_server, signed_in=False)
    try:
        visitor.goto(share_url)
        shared = visitor.get_by_test_id("share-images").get_by_role("img")
        expect(shared).to_have_attribute("alt", FIGURE_ALT)
        expect(shared).to_be_visible()
        assert natural_width(shared) > 0
        assert_fits_and_passes_axe(visitor, "share page")
    finally:
        visitor.context.close()


def scripted_svg_url(chromium: Browser, app_server: AppServer, fake_llm_server) -> str:
    page = phone_page(chromium, app_server)
    try:
        propose_and_run(page, fake_llm_server, "draw a badge", SVG_PROPOSAL)
        picture = page.get_by_test_id("run-images").get_by_role("img")
        expect(picture).to_have_attribute("alt", re.compile(r": badge\.svg$"))
        assert natural_width(picture) == 120
        # As an <img> the script never runs, whatever the headers.
        assert page.title() != "script ran"
        return app_server.url + str(picture.get_attribute("src"))
    finally:
        page.context.close()


def opened_on_its_own(page: Page, url: str) -> str | None:
    response = page.goto(url)
    assert response is not None and response.status == 200
    expect(page.locator("svg rect")).to_have_count(1)
    return page.locator("svg").get_attribute("data-ran")


def test_deny_an_svgs_script_does_not_run_when_its_url_is_opened(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer
) -> None:
    url = scripted_svg_url(chromium, app_server, fake_llm_server)
    page = new_context(chromium, app_server, signed_in=True).new_page()
    try:
        response = page.request.get(url)
        assert response.headers["content-security-policy"].startswith("sandbox;")
        assert response.headers["x-content-type-options"] == "nosniff"
        assert opened_on_its_own(page, url) is None
        assert page.title() != "script ran"
    finally:
        page.context.close()


@pytest.mark.sabotage
def test_sabotage_without_the_sandboxing_headers_the_svgs_script_runs(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer
) -> None:
    url = scripted_svg_url(chromium, app_server, fake_llm_server)
    page = new_context(chromium, app_server, signed_in=True).new_page()

    def strip_headers(route: Route) -> None:
        served = route.fetch()
        headers = {
            k: v
            for k, v in served.headers.items()
            if k not in ("content-security-policy", "x-content-type-options")
        }
        route.fulfill(response=served, headers=headers)

    try:
        page.route(url, strip_headers)
        assert opened_on_its_own(page, url) == "yes"
    finally:
        page.context.close()
