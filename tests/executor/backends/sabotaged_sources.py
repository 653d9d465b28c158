"""Sabotage by source: the zygote template's and the driver's code as the host hands it out
(executor/linux/zygote.py), with one line changed. Used by the bwrap zygote's and the
Docker template's tests; calls stack, each on the source the last one left."""

from __future__ import annotations

import pytest

from executor.linux import zygote


def sabotaged_child(monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """zygote_child.py with `old` replaced by `new` (which must be there)."""
    source = zygote._child_source()
    assert old in source
    monkeypatch.setattr(zygote, "_child_source", lambda: source.replace(old, new))


def sabotaged_driver(monkeypatch: pytest.MonkeyPatch, old: str, new: str) -> None:
    """driver.py with `old` replaced by `new` (which must be there)."""
    source = zygote.driver_source()
    assert old in source
    monkeypatch.setattr(zygote, "driver_source", lambda: source.replace(old, new))
