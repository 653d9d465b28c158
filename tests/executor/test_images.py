"""The host's decision on a run's output folder (executor/images.py), on a real folder the way a
session's workspace is one: only regular files, no-follow, count and bytes capped, types by
their own bytes. Each protection has a sabotage that switches it off and lets the attack in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from executor import images
from executor.images import ImageCaps, read_folder, sniff

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
CAPS = ImageCaps()
SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><circle r="4"/></svg>'
HTML_AS_SVG = b"<html><body><script>fetch('/api/v1/tokens')</script></body></html>"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "output").mkdir()
    return tmp_path


@pytest.fixture
def host_secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host file outside the workspace that would pass every other check."""
    secret = tmp_path_factory.mktemp("host") / "secret.png"
    secret.write_bytes(PNG + b"HOST SECRET")
    return secret


def test_it_accepts_each_image_type_by_its_bytes(workdir: Path) -> None:
    out = workdir / "output"
    (out / "a.png").write_bytes(PNG)
    (out / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 16)
    (out / "c.gif").write_bytes(b"GIF89a" + b"\x00" * 16)
    (out / "d.svg").write_bytes(SVG)
    found = read_folder(str(workdir), caps=CAPS)
    assert [(i.name, i.mime) for i in found.images] == [
        ("a.png", "image/png"),
        ("b.jpg", "image/jpeg"),
        ("c.gif", "image/gif"),
        ("d.svg", "image/svg+xml"),
    ]
    assert found.notes == ()


def test_it_never_follows_a_symlink_to_a_host_file(workdir: Path, host_secret: Path) -> None:
    (workdir / "output" / "out.png").symlink_to(host_secret)
    found = read_folder(str(workdir), caps=CAPS)
    assert found.images == ()
    assert found.notes == (
        "image_file: left out out.png: not a regular file "
        "(symlinks, folders and FIFOs are never read)",
    )


@pytest.mark.sabotage
def test_sabotage_following_symlinks_hands_out_a_host_file(
    workdir: Path, host_secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "_FILE_FLAGS", images._FILE_FLAGS & ~os.O_NOFOLLOW)
    (workdir / "output" / "out.png").symlink_to(host_secret)
    found = read_folder(str(workdir), caps=CAPS)
    assert found.images[0].data.endswith(b"HOST SECRET")


def test_it_never_follows_an_output_folder_that_is_a_symlink(
    tmp_path: Path, host_secret: Path
) -> None:
    (tmp_path / "output").symlink_to(host_secret.parent)
    assert read_folder(str(tmp_path), caps=CAPS).images == ()


@pytest.mark.sabotage
def test_sabotage_following_a_symlinked_output_folder_hands_out_a_host_file(
    tmp_path: Path, host_secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "_DIR_FLAGS", images._DIR_FLAGS & ~os.O_NOFOLLOW)
    (tmp_path / "output").symlink_to(host_secret.parent)
    assert read_folder(str(tmp_path), caps=CAPS).images[0].data.endswith(b"HOST SECRET")


def test_a_fifo_is_left_out_without_waiting_for_a_writer(workdir: Path) -> None:
    os.mkfifo(workdir / "output" / "plot.png")
    found = read_folder(str(workdir), caps=CAPS)
    assert found.images == ()
    assert found.notes[0].startswith("image_file: left out plot.png")


def test_a_huge_file_is_named_and_not_read(workdir: Path) -> None:
    with open(workdir / "output" / "big.png", "wb") as big:
        big.write(PNG)
        big.truncate(100 * 1024 * 1024)  # sparse: 100 MiB that cost no disk
    found = read_folder(str(workdir), caps=CAPS)
    assert found.images == ()
    assert found.notes == ("image_bytes: left out big.png: larger than 2 MiB per image",)


@pytest.mark.sabotage
def test_sabotage_without_the_per_image_cap_a_huge_file_is_taken(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(workdir / "output" / "big.png", "wb") as big:
        big.write(PNG)
        big.truncate(3 * 1024 * 1024)
    found = read_folder(
        str(workdir), caps=ImageCaps(max_image_bytes=1 << 30, max_total_bytes=1 << 30)
    )
    assert len(found.images[0].data) == 3 * 1024 * 1024


def test_the_images_together_are_capped(workdir: Path) -> None:
    for n in range(4):
        (workdir / "output" / f"{n}.png").write_bytes(PNG + b"\x00" * (2 * 1024 * 1024 - 100))
    found = read_folder(str(workdir), caps=CAPS)
    assert [i.name for i in found.images] == ["0.png", "1.png", "2.png"]
    assert found.notes == (
        "image_total_bytes: left out 3.png: past 6 MiB for a run's images together",
    )


def test_a_thousand_files_are_not_all_read(workdir: Path) -> None:
    for n in range(1000):
        (workdir / "output" / f"{n:04}.png").write_bytes(PNG)
    found = read_folder(str(workdir), caps=CAPS)
    assert [i.name for i in found.images] == [f"{n:04}.png" for n in range(8)]
    assert found.notes == (
        "image_count: left out 992 more: past the first 8 files of the output folder",
    )


@pytest.mark.sabotage
def test_sabotage_without_the_count_cap_a_thousand_images_come_back(workdir: Path) -> None:
    for n in range(1000):
        (workdir / "output" / f"{n:04}.png").write_bytes(PNG)
    found = read_folder(str(workdir), caps=ImageCaps(max_count=10_000))
    assert len(found.images) == 1000


def test_an_html_page_named_svg_is_not_an_image(workdir: Path) -> None:
    (workdir / "output" / "chart.svg").write_bytes(HTML_AS_SVG)
    found = read_folder(str(workdir), caps=CAPS)
    assert found.images == ()
    assert found.notes == ("image_type: left out chart.svg: not a PNG, JPEG, GIF or SVG image",)


@pytest.mark.sabotage
def test_sabotage_trusting_the_file_name_lets_an_html_page_in(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "sniff", lambda data: "image/svg+xml")
    (workdir / "output" / "chart.svg").write_bytes(HTML_AS_SVG)
    assert read_folder(str(workdir), caps=CAPS).images[0].data == HTML_AS_SVG


def test_an_svg_declaring_entities_is_refused() -> None:
    laughs = b'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaa">]><svg>&a;</svg>'
    assert sniff(laughs) is None
    assert sniff(SVG) == "image/svg+xml"


def test_a_session_gets_only_the_images_a_cell_changed(workdir: Path) -> None:
    (workdir / "output" / "old.png").write_bytes(PNG)
    before = images.snapshot(str(workdir))
    (workdir / "output" / "new.png").write_bytes(PNG)
    found = read_folder(str(workdir), caps=CAPS, since=before)
    assert [i.name for i in found.images] == ["new.png"]
