"""The optional pieces' checks name what is missing and how to get it (tests/prerequisites.py)."""

from __future__ import annotations

from pathlib import Path

from tests.prerequisites import chromium_problem


def test_a_missing_chromium_is_named_with_its_package(tmp_path: Path) -> None:
    problem = chromium_problem(tmp_path / "chromium")
    assert problem is not None
    assert str(tmp_path / "chromium") in problem
    assert "apt-get install -y chromium" in problem


def test_an_executable_chromium_is_no_problem(tmp_path: Path) -> None:
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    assert chromium_problem(browser) is not None  # not executable yet
    browser.chmod(0o755)
    assert chromium_problem(browser) is None
