"""A pending db change lists the statements the run sent, each with what it did (a DDL statement
says so rather than a negative row count), with Keep and Discard (issue 16, finding 5; issue 42).
Real server, real sandbox, real chromium; only the LLM is faked."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.fakes.llm_server import tool_call

pytestmark = pytest.mark.browser

PROPOSAL = {
    "forward_code": (
        'db.execute("CREATE TABLE users (name TEXT)")\n'
        'db.execute("INSERT INTO users VALUES (?)", ("Ana",))\n'
    ),
    "reverse_code": 'db.execute("DROP TABLE users")',
    "explanation": "Creates a users table with Ana in it.",
    "credentials": [],
    "hosts": [],
    "reversible": True,
}


def test_a_pending_db_change_lists_its_statements(signed_in_page: Page, fake_llm_server) -> None:
    page = signed_in_page
    fake_llm_server.script(tool_call(PROPOSAL))
    page.goto("/")
    page.get_by_placeholder("What should happen?").fill("create a users table with Ana")
    page.locator("select[name=kind]").select_option("db")
    page.get_by_test_id("generate").click()
    expect(page.get_by_test_id("forward-editor")).to_contain_text("CREATE TABLE users")
    panel = page.get_by_test_id("workspace-panel")

    page.get_by_test_id("run-forward").click()
    change_list = panel.get_by_test_id("change-list")
    expect(change_list).to_contain_text("CREATE TABLE users (name TEXT)", timeout=30_000)
    expect(change_list).to_contain_text("INSERT INTO users VALUES (?)")
    create = change_list.locator("li", has_text="CREATE TABLE users")
    expect(create.locator(".statement-outcome")).to_have_text("table created")
    expect(change_list).not_to_contain_text("-1")
    expect(change_list.locator("li", has_text="INSERT INTO")).to_contain_text("1 row(s) affected")
    expect(panel.get_by_test_id("countdown")).to_contain_text("discarded automatically in")
    # The bar that stands in for the panel's buttons counts the same seconds down.
    expect(page.get_by_test_id("decision-bar")).to_contain_text(
        re.compile(r"1 change waiting: Keep or Discard\. Discarded automatically in \d+ s\.")
    )
    expect(panel.get_by_role("button", name="Discard", exact=True)).to_be_visible()
    panel.get_by_test_id("discard").click()
    expect(panel.get_by_test_id("change-status")).to_have_text("Discarded", timeout=15_000)
