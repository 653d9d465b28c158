"""Images a run leaves in its output folder: what the sandbox proposes, what the host accepts.

A program writes PNG, JPEG, GIF or SVG files to /workspace/output (UNDOABLE_OUTPUT_DIR in its
environment; matplotlib figures left open are saved there by the in-sandbox drivers). Nothing
the sandbox wrote is trusted: the host takes at most `max_count` entries, reads only regular
files (O_NOFOLLOW, never a symlink, FIFO or folder), caps each image's bytes and all of them
together, and keeps a file only if its own bytes say it is one of those image types. An SVG
is only ever shown as an <img> (its scripts do not run there). Each cap that left something
out is named in one human line (`ImageSet.notes`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from xml.parsers import expat

OUTPUT_NAME = "output"  # the folder, relative to the workspace
OUTPUT_DIR = "/workspace/" + OUTPUT_NAME  # where the program sees it
OUTPUT_ENV = {"UNDOABLE_OUTPUT_DIR": OUTPUT_DIR}

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; it is then refused as not a file.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class ImageCaps:
    max_count: int = 8  # entries of the output folder looked at, in name order
    max_image_bytes: int = 2 * 1024 * 1024
    max_total_bytes: int = 6 * 1024 * 1024


@dataclass(frozen=True)
class Image:
    name: str  # the file's name in the output folder (shown as its caption)
    mime: str
    data: bytes

    def data_b64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def as_json(self) -> dict[str, str]:
        """The exec JSON shape, like Jupyter's display_data: base64 with a MIME type."""
        return {"mime": self.mime, "data": self.data_b64(), "name": self.name}


@dataclass(frozen=True)
class Candidate:
    """One entry of the output folder as proposed: `data` is None when it was not read."""

    name: str
    size: int
    data: bytes | None
    regular: bool = True


@dataclass(frozen=True)
class ImageSet:
    images: tuple[Image, ...] = ()
    notes: tuple[str, ...] = ()  # one line per cap that left something out, named first


@dataclass
class _Notes:
    left: dict[str, list[str]] = field(default_factory=dict)

    def add(self, cap: str, name: str) -> None:
        self.left.setdefault(cap, []).append(name)


_CAP_LINES = {
    "image_file": "{names}: not a regular file (symlinks, folders and FIFOs are never read)",
    "image_type": "{names}: not a PNG, JPEG, GIF or SVG image",
    "image_bytes": "{names}: larger than {per} per image",
    "image_total_bytes": "{names}: past {total} for a run's images together",
    "image_count": "{names}: past the first {count} files of the output folder",
}


def accept(candidates: Iterable[Candidate], *, more: int = 0, caps: ImageCaps) -> ImageSet:
    """The host's decision on what the sandbox proposed (`more`: entries past the count cap)."""
    images: list[Image] = []
    notes = _Notes()
    total = 0
    for index, cand in enumerate(candidates):
        name = _printable(cand.name)
        if index >= caps.max_count:
            notes.add("image_count", name)
            continue
        if not cand.regular:
            notes.add("image_file", name)
            continue
        if cand.size > caps.max_image_bytes or cand.data is None:
            notes.add("image_bytes", name)
            continue
        data = cand.data[: caps.max_image_bytes + 1]
        if len(data) > caps.max_image_bytes:
            notes.add("image_bytes", name)
            continue
        mime = sniff(data)
        if mime is None:
            notes.add("image_type", name)
            continue
        if total + len(data) > caps.max_total_bytes:
            notes.add("image_total_bytes", name)
            continue
        total += len(data)
        images.append(Image(name=name, mime=mime, data=data))
    if more:
        notes.add("image_count", f"{more} more")
    lines = []
    for cap, template in _CAP_LINES.items():
        names = notes.left.get(cap)
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            text = template.format(
                names=shown,
                per=_mib(caps.max_image_bytes),
                total=_mib(caps.max_total_bytes),
                count=caps.max_count,
            )
            lines.append(f"{cap}: left out {text}")
    return ImageSet(images=tuple(images), notes=tuple(lines))


Snapshot = dict[str, tuple[int, int, int]]  # name -> (inode, size, mtime_ns)


def snapshot(workdir: str) -> Snapshot:
    """What the output folder holds now, so `read_folder` can return only what changed."""
    with _output_fd(workdir) as dir_fd:
        if dir_fd is None:
            return {}
        found: Snapshot = {}
        for name in sorted(os.listdir(dir_fd)):
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                found[name] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return found


def read_folder(workdir: str, *, caps: ImageCaps, since: Snapshot | None = None) -> ImageSet:
    """The images in a host folder's output/ (a session's workspace), read without following
    anything the sandbox made: the folder and each file are opened O_NOFOLLOW relative to the
    workspace's fd, and only regular files are read, at most `max_image_bytes + 1` bytes."""
    with _output_fd(workdir) as dir_fd:
        if dir_fd is None:
            return ImageSet()
        names = sorted(os.listdir(dir_fd))
        if since is not None:
            names = [n for n in names if _changed(n, dir_fd, since)]
        looked = names[: caps.max_count]
        candidates = [_read_entry(name, dir_fd, caps) for name in looked]
        return accept(candidates, more=len(names) - len(looked), caps=caps)


def _changed(name: str, dir_fd: int, since: Snapshot) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return since.get(name) != (st.st_ino, st.st_size, st.st_mtime_ns)


def _read_entry(name: str, dir_fd: int, caps: ImageCaps) -> Candidate:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:  # ELOOP: a symlink; or gone since the listing
        return Candidate(name=name, size=0, data=None, regular=False)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Candidate(name=name, size=0, data=None, regular=False)
        if st.st_size > caps.max_image_bytes:
            return Candidate(name=name, size=st.st_size, data=None)
        data = os.read(fd, caps.max_image_bytes + 1)
        return Candidate(name=name, size=len(data), data=data)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _output_fd(workdir: str):  # type: ignore[no-untyped-def]
    root = os.open(workdir, _DIR_FLAGS)
    try:
        try:
            fd: int | None = os.open(OUTPUT_NAME, _DIR_FLAGS, dir_fd=root)
        except OSError:  # none, or not a folder we will follow
            fd = None
        try:
            yield fd
        finally:
            if fd is not None:
                os.close(fd)
    finally:
        os.close(root)


def sniff(data: bytes) -> str | None:
    """The image type the bytes themselves show, or None: the file's name is not asked."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if _is_svg(data):
        return "image/svg+xml"
    return None


class _Root(Exception):
    def __init__(self, tag: str) -> None:
        self.tag = tag


def _is_svg(data: bytes) -> bool:
    """An XML document whose root element is <svg>; no entity declarations (no expansion)."""
    parser = expat.ParserCreate(namespace_separator=" ")

    def start(tag: str, attrs: object) -> None:
        raise _Root(tag)

    def refuse(*args: object) -> None:
        raise ValueError("entity declarations are refused")

    parser.StartElementHandler = start
    parser.EntityDeclHandler = refuse
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(data, True)
    except _Root as root:
        return root.tag in ("svg", "http://www.w3.org/2000/svg svg")
    except (expat.ExpatError, ValueError):
        return False
    return False


def _printable(name: str) -> str:
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in name)
    return cleaned[:120]


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"
