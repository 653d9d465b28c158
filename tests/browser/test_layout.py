"""Every page fits a phone: at 390 and 360 px wide nothing scrolls the page sideways (a code
block may scroll inside its own box). Also writes the README's screenshots: set
UNDOABLE_SCREENSHOT_DIR=docs/screenshots to keep them, otherwise they go to a temporary folder.

Real server, real sandbox (for the pending fs change), real chromium; only the LLM is faked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import AppServer
from tests.browser.site import new_context, pending_fs_site
from tests.fakes.llm_server import FakeLLMServer

pytestmark = pytest.mark.browser

LONG_DIR = "reports/quarterly-summaries-for-the-northern-region-sales-team"
PROPOSAL = {
    "forward_code": (
        "import os\n"
        f"os.makedirs({LONG_DIR!r}, exist_ok=True)\n"
        f"open({LONG_DIR + '/summary-of-the-third-quarter.txt'!r}, 'w').write("
        "'Revenue went up in every single month of the quarter, mostly thanks to the new "
        "subscription plans that were introduced in July.\\n')\n"
        "print('Wrote the summary of the third quarter into', "
        f"{LONG_DIR!r})\n"
    ),
    "reverse_code": f"import shutil\nshutil.rmtree({LONG_DIR.split('/')[0]!r})\n",
    "explanation": "Writes a quarterly summary into a new reports folder of the workspace.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
PROMPT = "write a summary of the third quarter into the reports folder"
# The pages of `Site.paths`; those in ANONYMOUS are opened without signing in.
PAGES = [
    "home",
    "query",
    "history",
    "review",
    "tokens",
    "limits",
    "shares",
    "share",
    "login",
    "signup",
    "landing",
    "404",
]
ANONYMOUS = {"login", "signup", "landing"}
SCREENSHOTS = ["home", "query", "history", "review", "share", "landing"]
# What shows that a page has finished drawing itself (the query page fetches its change panel).
READY = {"query": "[data-testid=keep]", "review": "[data-changes-waiting][data-live]"}

# Which elements reach past the right edge (the last few in page order), to say what to fix.
OVERFLOW_SCRIPT = """() => {
  const width = window.innerWidth;
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 0.5 && !el.closest('pre, .cm-scroller')) {
      const cls = (typeof el.className === 'string' ? el.className : '').trim();
      const name = `${el.tagName.toLowerCase()}.${cls.replace(/\\s+/g, '.')}`;
      wide.push(`${name} right=${Math.round(box.right)}`);
    }
  }
  const scrollWidth = document.documentElement.scrollWidth;
  return {scrollWidth: scrollWidth, innerWidth: width, wide: wide.slice(-8)};
}"""


@dataclass
class Site:
    paths: dict[str, str]


@pytest.fixture(scope="module")
def site(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer
) -> Iterator[Site]:
    """An fs query whose run left a pending change, a share link of it and an API token."""
    yield Site(
        paths=pending_fs_site(
            chromium,
            app_server,
            fake_llm_server,
            prompt=PROMPT,
            proposal=PROPOSAL,
            token_name="laptop agent",
            share_output=True,
        )
    )


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(os.environ.get("UNDOABLE_SCREENSHOT_DIR") or tmp_path_factory.mktemp("screenshots"))


def _open(chromium: Browser, app_server: AppServer, site: Site, name: str, width: int) -> Page:
    context = new_context(chromium, app_server, width=width, signed_in=name not in ANONYMOUS)
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.goto(site.paths[name])
    expect(page.locator(".site-header")).to_be_visible()
    return page


@pytest.mark.parametrize("width", [390, 360])
@pytest.mark.parametrize("name", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(
    chromium: Browser, app_server: AppServer, site: Site, name: str, width: int
) -> None:
    page = _open(chromium, app_server, site, name, width)
    try:
        layout = page.evaluate(OVERFLOW_SCRIPT)
        assert layout["scrollWidth"] <= layout["innerWidth"], layout
    finally:
        page.context.close()


def test_the_pending_change_is_on_the_query_page_at_phone_width(
    chromium: Browser, app_server: AppServer, site: Site
) -> None:
    page = _open(chromium, app_server, site, "query", 360)
    try:
        expect(page.get_by_test_id("keep")).to_be_visible(timeout=15_000)
        assert page.evaluate(OVERFLOW_SCRIPT)["scrollWidth"] <= 360
    finally:
        page.context.close()


def test_history_rows_become_stacked_cards_on_a_phone(
    chromium: Browser, app_server: AppServer, site: Site
) -> None:
    page = _open(chromium, app_server, site, "history", 390)
    try:
        row = page.locator(".history-table tbody tr").filter(has_text=PROMPT[:40]).first
        expect(row).to_be_visible()
        assert page.locator(".history-table thead").bounding_box()["height"] <= 1
        cells = row.locator("td").evaluate_all(
            "cells => cells.map(c => getComputedStyle(c).display)"
        )
        assert "table-cell" not in cells
        kind_label = row.locator("td[data-label=Kind]").evaluate(
            "cell => getComputedStyle(cell, '::before').content"
        )
        assert kind_label == '"Kind"'
    finally:
        page.context.close()


# Every element of a card that reaches past the card's content box (its inside edge: the border
# and the padding are the card's own), ignoring boxes that scroll their own content.
CARD_SPILL_SCRIPT = """() => {
  const spills = [];
  for (const card of document.querySelectorAll('.card, .auth-card, .account-section')) {
    const box = card.getBoundingClientRect();
    if (!box.width) continue;
    const style = getComputedStyle(card);
    const left = box.left + parseFloat(style.borderLeftWidth);
    const right = box.right - parseFloat(style.borderRightWidth);
    for (const el of card.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (!r.width || el.closest('pre, .cm-scroller')) continue;
      if (r.right > right + 0.5 || r.left < left - 0.5) {
        const cls = (typeof el.className === 'string' ? el.className : '').trim();
        spills.push(`${card.className} > ${el.tagName.toLowerCase()}.${cls} ` +
                    `[${Math.round(r.left)}, ${Math.round(r.right)}] outside ` +
                    `[${Math.round(left)}, ${Math.round(right)}]`);
      }
    }
  }
  return spills;
}"""

STORE_CREDENTIALS_SCRIPT = """() => localStorage.setItem('undoable.credentials.v1', JSON.stringify({
  SLACK_TOKEN: 'xoxb-1', GITHUB_PERSONAL_ACCESS_TOKEN_FOR_THE_RELEASES: 'ghp-2'}))"""

# The rows the header's items sit on (items whose tops differ by more than half a line).
HEADER_ROWS_SCRIPT = """() => {
  const tops = [...document.querySelectorAll('.site-header > *')]
    .filter(el => el.getBoundingClientRect().width > 0 && !el.classList.contains('skip-link'))
    .map(el => el.getBoundingClientRect().top).sort((a, b) => a - b);
  let rows = 0, last = -1e9;
  for (const top of tops) { if (top - last > 12) { rows += 1; last = top; } }
  return rows;
}"""


@pytest.mark.parametrize("width", [360, 1280])
@pytest.mark.parametrize(
    "name", ["query", "home", "history", "review", "tokens", "login", "signup"]
)
def test_each_card_keeps_its_content_inside_its_border(
    chromium: Browser, app_server: AppServer, site: Site, name: str, width: int
) -> None:
    page = _open(chromium, app_server, site, name, width)
    try:
        # Stored credentials fill the Credentials card's rows (what ran past it at 360 px).
        page.evaluate(STORE_CREDENTIALS_SCRIPT)
        page.reload()
        expect(page.locator(READY.get(name, "main"))).to_be_visible(timeout=15_000)
        assert page.evaluate(CARD_SPILL_SCRIPT) == []
    finally:
        page.context.close()


@pytest.mark.parametrize("width", [360, 1280])
def test_the_signed_in_header_takes_at_most_two_rows(
    chromium: Browser, app_server: AppServer, site: Site, width: int
) -> None:
    page = _open(chromium, app_server, site, "query", width)
    try:
        expect(page.get_by_test_id("changes-waiting")).to_be_visible()
        assert page.evaluate(HEADER_ROWS_SCRIPT) <= (2 if width < 700 else 1)
    finally:
        page.context.close()


def test_the_landing_page_shows_the_way_in_on_a_phones_first_screen(
    chromium: Browser, app_server: AppServer, site: Site
) -> None:
    page = _open(chromium, app_server, site, "landing", 360)
    page.set_viewport_size({"width": 360, "height": 780})
    try:
        for way_in in ("landing-cta-signup", "landing-cta-signin"):
            expect(page.get_by_test_id(way_in)).to_be_in_viewport(ratio=1)
        page.get_by_test_id("landing-cta-signup").click()
        expect(page.get_by_role("button", name="Create account")).to_be_visible()
    finally:
        page.context.close()


@pytest.mark.parametrize("width", [1280, 390])
@pytest.mark.parametrize("name", SCREENSHOTS)
def test_screenshots_of_the_main_pages(
    chromium: Browser,
    app_server: AppServer,
    site: Site,
    screenshot_dir: Path,
    name: str,
    width: int,
) -> None:
    page = _open(chromium, app_server, site, name, width)
    try:
        expect(page.locator(READY.get(name, "main"))).to_be_visible(timeout=15_000)
        path = screenshot_dir / f"{name}-{width}.png"
        page.screenshot(path=str(path), full_page=True, animations="disabled")
        assert 0 < path.stat().st_size < 600_000
    finally:
        page.context.close()
