"""The query page's controls read as what they do (issue 42, findings 4 and 7): the toolbar groups
Propose again apart from sharing (the "with last output" box beside Share, not after Propose
again), and the allowed-hosts box sits below its explanation, not inside its sentence. At 1280
and 360 px. Real server, real chromium; only the LLM is faked."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Locator, expect

from tests.browser.conftest import AppServer
from tests.browser.site import new_person
from tests.fakes.llm_server import FakeLLMServer, tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": "print('posted')",
    "reverse_code": "print('deleted')",
    "explanation": "Posts a message.",
    "credentials": [],
    "hosts": ["slack.com"],
    "reversible": True,
}


def box(locator: Locator) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None
    return found


def inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        inner["x"] >= outer["x"] - 0.5
        and inner["y"] >= outer["y"] - 0.5
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + 0.5
    )


@pytest.mark.parametrize("width", [1280, 360])
def test_the_toolbar_groups_its_controls_and_the_hosts_box_has_a_line_of_its_own(
    chromium: Browser, app_server: AppServer, fake_llm_server: FakeLLMServer, width: int
) -> None:
    page = new_person(chromium, app_server, width=width, height=800)
    try:
        fake_llm_server.script(tool_call(PROPOSAL))
        page.get_by_placeholder("What should happen?").fill("post hello to Slack")
        page.locator("select[name=kind]").select_option("rest")
        page.get_by_test_id("generate").click()
        expect(page.get_by_test_id("forward-editor")).to_contain_text("posted")

        code, share = page.get_by_test_id("tools-code"), page.get_by_test_id("tools-share")
        expect(code).to_have_accessible_name("Code")
        expect(share).to_have_accessible_name("Share a read-only link")
        checkbox = page.get_by_test_id("share-include-output")
        assert inside(box(checkbox), box(share))
        assert inside(box(page.get_by_test_id("share-button")), box(share))
        assert not inside(box(checkbox), box(code))
        assert inside(box(page.get_by_test_id("propose-again")), box(code))

        hosts = page.get_by_test_id("allowed-hosts")
        expect(hosts).to_have_accessible_name("Allowed hosts")
        help_text = page.get_by_test_id("allowed-hosts-help")
        expect(hosts).to_have_accessible_description(help_text.inner_text())
        # The box starts below the whole explanation, at the form's left edge.
        assert box(hosts)["y"] >= box(help_text)["y"] + box(help_text)["height"]
        assert abs(box(hosts)["x"] - box(help_text)["x"]) <= 1
    finally:
        page.context.close()
