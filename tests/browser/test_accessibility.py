"""Accessibility: axe-core's WCAG 2 A/AA rules find no serious or critical violation on the main
pages (light and dark), and a person with only a keyboard can write a prompt, propose, run and
keep, seeing where the focus is at every step.

axe-core rather than Playwright's accessibility snapshot: the snapshot only lists roles and names,
while axe also checks colour contrast, landmarks, heading order and ARIA use. Its single built file
is vendored under tests/browser/vendor/ (test-only, never served by the app).

Real server, real sandbox (for the pending fs change), real chromium; only the LLM is faked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import AppServer
from tests.browser.site import Scheme, new_context, pending_fs_site
from tests.fakes.llm_server import FakeLLMServer, tool_call

pytestmark = pytest.mark.browser


AXE = Path(__file__).parent / "vendor" / "axe.min.js"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING_IMPACTS = {"serious", "critical"}
PROPOSAL = {
    "forward_code": "open('notes.txt', 'w').write('first line\\n')\nprint('wrote notes.txt')\n",
    "reverse_code": "import os\nos.remove('notes.txt')\n",
    "explanation": "Writes a notes file into the workspace.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}
PROMPT = "write a notes file into the workspace"
ANONYMOUS = {"landing", "login", "signup"}
# What shows that a page has finished drawing itself.
READY = {
    "query": "[data-testid=keep]",
    "home": "[data-testid=by-hand]",
    "review": "[data-testid=review-item] >> nth=0",
}

RUN_AXE = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map(n => ({target: n.target.join(' '), summary: n.failureSummary})),
  }));
}"""
# The focused element and how it shows that it has the focus.
FOCUS_SCRIPT = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  return {
    tag: el.tagName.toLowerCase(),
    testid: el.dataset.testid || '',
    name: el.getAttribute('name') || '',
    text: (el.innerText || '').trim().slice(0, 40),
    focusVisible: el.matches(':focus-visible'),
    outline: style.outlineStyle,
    outlineWidth: style.outlineWidth,
    boxShadow: style.boxShadow,
  };
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
            token_name="screen reader agent",
        )
    )


def _describe(violations: list[dict]) -> str:
    lines = []
    for violation in violations:
        lines.append(f"[{violation['impact']}] {violation['id']}: {violation['help']}")
        for node in violation["nodes"]:
            summary = " ".join(node["summary"].split())
            lines.append(f"    {node['target']}: {summary}")
    return "\n".join(lines)


@pytest.mark.parametrize("color_scheme", ["light", "dark"])
@pytest.mark.parametrize(
    "name",
    [
        "landing",
        "login",
        "signup",
        "home",
        "query",
        "history",
        "review",
        "tokens",
        "limits",
        "shares",
        "share",
    ],
)
def test_axe_finds_no_serious_violation(
    chromium: Browser, app_server: AppServer, site: Site, name: str, color_scheme: Scheme
) -> None:
    context = new_context(
        chromium, app_server, signed_in=name not in ANONYMOUS, color_scheme=color_scheme
    )
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto(site.paths[name])
        expect(page.locator(READY.get(name, "main"))).to_be_visible(timeout=15_000)
        page.add_script_tag(path=str(AXE))
        violations = page.evaluate(RUN_AXE, WCAG_TAGS)
        blocking = [v for v in violations if v["impact"] in BLOCKING_IMPACTS]
        assert not blocking, f"axe on {name} ({color_scheme}):\n{_describe(blocking)}"
    finally:
        context.close()


def _tab_to(page: Page, selector: str, *, limit: int = 60) -> dict:
    """Press Tab until the focused element matches `selector`; return how it shows its focus.
    In a code editor Tab indents: Escape then Tab leaves it, as CodeMirror documents."""
    for _ in range(limit):
        if page.evaluate("() => document.activeElement.matches('.cm-content')"):
            page.keyboard.press("Escape")
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return page.evaluate(FOCUS_SCRIPT)
    raise AssertionError(f"{limit} presses of Tab never reached {selector}")


def _assert_focus_visible(focus: dict) -> None:
    assert focus["focusVisible"], focus
    outlined = focus["outline"] != "none" and focus["outlineWidth"] not in ("0px", "")
    assert outlined or focus["boxShadow"] != "none", focus


@pytest.fixture
def keyboard_page(chromium: Browser, app_server: AppServer) -> Iterator[Page]:
    context = new_context(chromium, app_server, signed_in=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def test_a_keyboard_alone_proposes_runs_and_keeps_a_change(
    keyboard_page: Page, fake_llm_server: FakeLLMServer
) -> None:
    page = keyboard_page
    fake_llm_server.script(tool_call(PROPOSAL))
    page.goto("/")
    expect(page.get_by_test_id("by-hand")).to_be_visible()

    _assert_focus_visible(_tab_to(page, ".skip-link"))
    _assert_focus_visible(_tab_to(page, "textarea[name=prompt]"))
    page.keyboard.type(PROMPT)
    _assert_focus_visible(_tab_to(page, "select[name=kind]"))
    page.keyboard.type("fs")
    expect(page.locator("select[name=kind]")).to_have_value("fs")
    _assert_focus_visible(_tab_to(page, "[data-testid=generate]"))
    _assert_focus_visible(_tab_to(page, "[data-testid=by-hand]"))
    page.keyboard.press("Shift+Tab")
    assert page.evaluate(FOCUS_SCRIPT)["testid"] == "generate"
    page.keyboard.press("Enter")

    expect(page.get_by_test_id("forward-editor")).to_contain_text("notes.txt")
    expect(page.locator("#editor-keys")).to_contain_text("press Esc, then Tab")
    _assert_focus_visible(_tab_to(page, "[data-testid=run-forward]"))
    page.keyboard.press("Enter")
    keep = page.get_by_test_id("keep")
    expect(keep).to_be_visible(timeout=30_000)

    _assert_focus_visible(_tab_to(page, "[data-testid=keep]", limit=80))
    page.keyboard.press("Space")
    expect(page.get_by_test_id("change-status")).to_have_text("Kept")
