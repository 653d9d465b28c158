"""Limits: a validated schema with units in the names; a request can only lower the caps."""

from __future__ import annotations

import dataclasses

import pytest

from executor.errors import InvalidLimits
from executor.limits import Limits


def test_the_defaults_deny_the_network_and_stay_small() -> None:
    limits = Limits()

    assert limits.network == "none"
    assert limits.wall_time_s <= 60
    assert limits.memory_mib <= 1024
    assert limits.max_pids <= 256


def test_every_limit_names_its_unit_or_is_a_count() -> None:
    units = ("_s", "_mib", "_bytes")
    counts = ("max_pids", "max_open_files", "network")

    names = [field.name for field in dataclasses.fields(Limits)]

    assert [name for name in names if not name.endswith(units) and name not in counts] == []


@pytest.mark.parametrize("network", ["host", "bridge", "", "None", "all"])
def test_it_rejects_an_unknown_network_mode(network: str) -> None:
    with pytest.raises(InvalidLimits, match="network"):
        Limits(network=network)


@pytest.mark.parametrize(
    "bad",
    [
        {"wall_time_s": 0},
        {"memory_mib": -1},
        {"max_pids": True},
        {"cpu_time_s": "5"},
        {"max_output_bytes": None},
    ],
    ids=["zero", "negative", "bool", "string", "none"],
)
def test_it_rejects_a_limit_that_is_not_a_positive_number(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidLimits):
        Limits(**bad)  # type: ignore[arg-type]


def test_a_request_lowers_the_caps() -> None:
    caps = Limits(wall_time_s=10.0, memory_mib=256)

    narrowed = caps.narrowed(wall_time_s=2.5, memory_mib=64)

    assert (narrowed.wall_time_s, narrowed.memory_mib) == (2.5, 64)
    assert narrowed.max_pids == caps.max_pids


def test_a_request_cannot_raise_a_cap() -> None:
    with pytest.raises(InvalidLimits, match="above the server cap"):
        Limits(memory_mib=256).narrowed(memory_mib=257)


def test_a_request_cannot_name_an_unknown_limit() -> None:
    with pytest.raises(InvalidLimits, match="unknown limit"):
        Limits().narrowed(gpu_count=1)


def test_a_request_cannot_open_the_network_the_server_closed() -> None:
    with pytest.raises(InvalidLimits, match="network"):
        Limits(network="none").narrowed(network="allowlist")


def test_none_in_a_request_keeps_the_cap() -> None:
    caps = Limits(wall_time_s=7)

    assert caps.narrowed(wall_time_s=None) == caps


def test_a_seconds_limit_keeps_its_fraction_when_the_cap_was_an_int() -> None:
    narrowed = Limits(wall_time_s=10).narrowed(wall_time_s=2.5)

    assert narrowed.wall_time_s == 2.5


def test_an_integer_limit_stays_an_integer_when_narrowed() -> None:
    narrowed = Limits(memory_mib=256).narrowed(memory_mib=128.0)

    assert (narrowed.memory_mib, type(narrowed.memory_mib)) == (128, int)


@pytest.mark.parametrize("value", [0, -5, True, "1"])
def test_a_request_with_a_non_positive_or_non_numeric_value_fails(value: object) -> None:
    with pytest.raises(InvalidLimits):
        Limits().narrowed(max_pids=value)


def test_memory_bytes_follows_memory_mib() -> None:
    assert Limits(memory_mib=3).memory_bytes == 3 * 1024 * 1024


def test_limits_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().wall_time_s = 99  # type: ignore[misc]
