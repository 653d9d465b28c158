"""RunSpec: what to run, validated before any sandbox starts."""

from __future__ import annotations

import dataclasses

import pytest

from executor.errors import InvalidSpec
from executor.spec import RunSpec, validate_relative_path


def test_a_plain_python_spec_has_an_empty_environment_and_no_files() -> None:
    spec = RunSpec(code="print(1)")

    assert (spec.language, spec.env, spec.files, spec.stdin) == ("python", {}, {}, b"")
    assert spec.interpreter_mode is False


def test_bash_is_a_language() -> None:
    assert RunSpec(code="echo hi", language="bash").language == "bash"


@pytest.mark.parametrize("language", ["ruby", "Python", "", "sh"])
def test_it_rejects_an_unknown_language(language: str) -> None:
    with pytest.raises(InvalidSpec, match="unknown language"):
        RunSpec(code="x", language=language)


def test_it_rejects_code_with_a_nul_byte() -> None:
    with pytest.raises(InvalidSpec, match="NUL"):
        RunSpec(code="print(1)\x00")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "../outside.txt",
        "a/../../b",
        "back\\slash",
        "nul\x00byte",
        "/".join(["d"] * 17),
        "x" * 256,
    ],
    ids=[
        "empty",
        "absolute",
        "dotdot",
        "dotdot-inside",
        "backslash",
        "nul",
        "too-deep",
        "too-long",
    ],
)
def test_it_rejects_a_file_name_that_could_leave_the_workdir(name: str) -> None:
    with pytest.raises(InvalidSpec):
        RunSpec(code="x", files={name: b"data"})


@pytest.mark.parametrize("name", ["data.csv", "src/pkg/mod.py", ".hidden", "données/ünï.txt"])
def test_it_accepts_a_relative_file_name(name: str) -> None:
    assert str(validate_relative_path(name)) == name


@pytest.mark.parametrize(("name", "inside"), [("a//b", "a/b"), ("./here.txt", "here.txt")])
def test_redundant_path_parts_are_normalized_inside_the_workdir(name: str, inside: str) -> None:
    assert str(validate_relative_path(name)) == inside


@pytest.mark.parametrize(
    ("name", "error"),
    [
        (".", "invalid file name"),
        ("\ud800.txt", "not UTF-8"),  # JSON can carry a lone surrogate; no file can be named so
        ("\u00e9" * 128, "over 255 bytes"),  # 128 characters, 256 bytes: over the kernel's NAME_MAX
        ("./a", "write it 'a'"),
        ("a//b", "write it 'a/b'"),
        ("dir/", "write it 'dir'"),
    ],
)
def test_a_runs_file_name_must_be_one_the_sandbox_can_write_as_given(name: str, error: str) -> None:
    with pytest.raises(InvalidSpec, match=error):
        RunSpec(code="x", files={name: b"data"})


@pytest.mark.parametrize("files", [{"a": b"", "a/b": b""}, {"a/b/c": b"", "a": b""}])
def test_a_name_cannot_be_a_file_and_another_files_folder(files: dict[str, bytes]) -> None:
    with pytest.raises(InvalidSpec, match="'a' is both a file and a folder"):
        RunSpec(code="x", files=files)


def test_files_may_share_folders() -> None:
    files = {"a/b": b"1", "a/c/d": b"2", "\u00e9" * 127: b"3"}
    assert RunSpec(code="x", files=files).files == files


@pytest.mark.parametrize("key", ["1ABC", "WITH-DASH", "WITH SPACE", "", "A=B", "X" * 129])
def test_it_rejects_an_invalid_environment_variable_name(key: str) -> None:
    with pytest.raises(InvalidSpec, match="environment variable"):
        RunSpec(code="x", env={key: "value"})


def test_it_rejects_an_environment_value_with_a_nul_byte() -> None:
    with pytest.raises(InvalidSpec, match="NUL"):
        RunSpec(code="x", env={"TOKEN": "a\x00b"})


def test_it_accepts_an_allowlisted_environment() -> None:
    spec = RunSpec(code="x", env={"SLACK_TOKEN": "xoxb-1", "_PRIVATE": ""})

    assert spec.env == {"SLACK_TOKEN": "xoxb-1", "_PRIVATE": ""}


def test_a_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunSpec(code="x").code = "y"  # type: ignore[misc]
