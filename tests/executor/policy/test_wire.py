"""executor.policy.wire: the one framing between the host and every in-sandbox supervisor, and
the host's checks on what comes back (kinds, per-kind caps, JSON shapes, never marshal).

The readers are driven with bytes here; the session tests at the bottom send the hostile frames
from a real session cell, which runs in the supervisor's own process and so can write on its
reply pipe, under bwrap and Docker alike.
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from hostile_kit import TEST_LIMITS

import executor
from executor import RunResult, RunSpec
from executor.backends.base import Backend
from executor.backends.docker.wire import DockerDemux, driver_frames, proposed_images
from executor.errors import SandboxFailed
from executor.limits import Limits
from executor.linux import pool
from executor.linux.loop import StatusReader
from executor.policy import bwrap_args, wire
from executor.result import SUPERVISOR_LOST
from executor.sessions.config import SessionConfig
from executor.sessions.manager import SessionManager
from tests.prerequisites import ROOTFS

HONEST_REPLY = {
    "exit_code": 0,
    "stdout": "forged\n",
    "stderr": "",
    "timed_out": False,
    "truncated": False,
    "duration_s": 0.0,
}


def test_frames_split_across_reads_come_out_whole():
    stream = wire.frame(b"o", b"abc") + wire.frame(b"s", b"{}")
    reader = wire.FrameReader({b"o": 10, b"s": 10})
    out = [got for i in range(len(stream)) for got in reader.feed(stream[i : i + 1])]
    assert out == [(b"o", b"abc"), (b"s", b"{}")]


def test_docker_frames_come_out_whole_through_the_attach_demux():
    inner = wire.frame(b"o", b"abc")
    muxed = bytes([1, 0, 0, 0]) + len(inner).to_bytes(4, "big") + inner
    demux, frames = DockerDemux(), driver_frames()
    out = []
    for i in range(len(muxed)):
        for _stream, payload in demux.feed(muxed[i : i + 1]):
            out.extend(frames.feed(payload))
    assert out == [(b"o", b"abc")]


def test_deny_a_frame_of_a_kind_the_reader_does_not_expect():
    with pytest.raises(wire.WireError, match=r"frame of kind b'x', expected one of 'os'"):
        list(wire.FrameReader({b"o": 10, b"s": 10}).feed(wire.frame(b"x", b"a")))


def test_deny_an_oversized_frame_on_its_header_before_its_body():
    reader = wire.FrameReader({b"s": 100})
    with pytest.raises(
        wire.FrameTooLarge, match=r"4294967295-byte b's' frame, past its cap of 100"
    ):
        list(reader.feed(b"s" + (2**32 - 1).to_bytes(4, "big")))
    assert reader.buffered == 5


def test_deny_an_oversized_docker_frame():
    with pytest.raises(SandboxFailed, match="oversized Docker frame"):
        list(DockerDemux().feed(bytes([1, 0, 0, 0]) + (1 << 30).to_bytes(4, "big")))


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (marshal.dumps(HONEST_REPLY), "malformed JSON"),  # never unmarshalled
        (b"{not json", "malformed JSON"),
        (b'{"exit_code": NaN}', "malformed JSON"),
        (json.dumps([HONEST_REPLY]).encode(), "wrong shape: list"),
        (json.dumps({**HONEST_REPLY, "extra": 1}).encode(), "wrong shape"),
        (json.dumps({**HONEST_REPLY, "exit_code": "0"}).encode(), "'exit_code' is '0'"),
        (json.dumps({**HONEST_REPLY, "timed_out": 1}).encode(), "'timed_out' is 1"),
        (json.dumps({**HONEST_REPLY, "exit_code": True}).encode(), "'exit_code' is True"),
    ],
)
def test_deny_a_payload_that_is_not_the_shape_json_the_host_expects(payload, error):
    with pytest.raises(wire.WireError, match=error):
        wire.parse_json(b"c", payload, wire.CELL_REPLY)


def test_an_honest_payload_is_taken():
    assert wire.parse_json(b"c", json.dumps(HONEST_REPLY).encode(), wire.CELL_REPLY) == HONEST_REPLY


@pytest.mark.sabotage
def test_sabotage_without_the_checks_a_wrong_kind_and_a_wrong_shape_get_through(monkeypatch):
    monkeypatch.setattr(wire, "CHECKS_ON", False)
    assert list(wire.FrameReader({b"o": 1}).feed(wire.frame(b"x", b"ab"))) == [(b"x", b"ab")]
    forged = {**HONEST_REPLY, "exit_code": "0"}
    assert wire.parse_json(b"c", json.dumps(forged).encode(), wire.CELL_REPLY) == forged


def status(wait_status: int, cpu_us: int) -> bytes:
    body = json.dumps({"wait_status": wait_status, "cpu_us": cpu_us}).encode()
    return wire.frame(b"s", body)


def test_the_bwrap_status_stream_gives_the_wait_status_and_cpu_time():
    reader = StatusReader()
    assert reader.feed(wire.READY) is None
    assert reader.feed(wire.frame(b"m", b"0") + status(256, 1500)) == (256, 0.0015)
    assert reader.error is None


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        (wire.frame(b"s", marshal.dumps({"wait_status": 0, "cpu_us": 0})), "malformed JSON"),
        (wire.frame(b"s", b'{"wait_status": "0", "cpu_us": 0}'), "'wait_status' is '0'"),
        (wire.frame(b"o", b"forged output"), "frame of kind b'o'"),
        (b"s" + (1 << 20).to_bytes(4, "big"), "past its cap"),
        (b"exit 0 0\n", "frame of kind b'e'"),  # the old line protocol is no frame at all
    ],
)
def test_deny_a_bwrap_status_stream_the_wire_format_refuses(stream, error):
    reader = StatusReader()
    assert reader.feed(stream) is None
    assert reader.error is not None and error in reader.error
    assert reader.feed(status(0, 0)) is None  # nothing after a refused frame counts


def test_deny_a_docker_status_of_the_wrong_shape():
    frames = driver_frames()
    ((kind, body),) = frames.feed(wire.frame(b"s", b'{"exit_code": 0}'))
    with pytest.raises(wire.WireError, match="wrong shape"):
        wire.parse_json(kind, body, wire.CONTAINER_STATUS)


PNG = b"\x89PNG\r\n\x1a\n"


def entry(name: str, *, sent: int, size: int | None = None, regular: bool = True) -> bytes:
    header = {"name": name.encode().hex(), "regular": regular, "size": size, "sent": sent}
    return json.dumps({**header, "size": sent if size is None else size}).encode()


def test_proposed_images_are_gathered_across_frames_and_decided_by_the_host():
    proposed = proposed_images()
    proposed.feed(b"i", entry("a.png", sent=len(PNG) + 4))
    proposed.feed(b"d", PNG)
    proposed.feed(b"d", b"\x00" * 4)
    proposed.feed(b"i", entry("b.png", sent=0, regular=False))
    proposed.feed(b"i", entry("c.png", sent=0, size=1 << 30))
    proposed.feed(b"m", b"3")
    found = proposed.images()
    assert [(i.name, i.data) for i in found.images] == [("a.png", PNG + b"\x00" * 4)]
    assert [note.split(":")[0] for note in found.notes] == [
        "image_file",
        "image_bytes",
        "image_count",
    ]


CAPS = wire.IMAGE_CAPS


@pytest.mark.parametrize(
    "frames",
    [
        [(b"i", entry("a.png", sent=1)), (b"d", b"ab")],  # more bytes than announced
        [(b"i", entry("a.png", sent=CAPS.max_image_bytes + 1))],  # past the per-image cap
        [(b"i", entry(f"{n}.png", sent=0)) for n in range(CAPS.max_count + 1)],
        [(b"i", entry("a.png", sent=5, regular=False))],  # bytes of what is not a file
        [(b"i", b"{not json")],
        [(b"i", entry("a.png", sent=4)), (b"m", b"0")],  # fewer bytes than announced
    ],
)
def test_deny_image_frames_past_the_caps(frames):
    proposed = proposed_images()
    with pytest.raises(wire.WireError):
        for kind, body in frames:
            proposed.feed(kind, body)
        proposed.images()


# A cell runs in the session supervisor's own process: it finds the reply fd in the
# supervisor's frame and writes FRAME (bytes) there, before the supervisor's honest reply.
HOSTILE_CELL = """
import os, sys
frame = sys._getframe()
while "reply_fd" not in frame.f_locals:
    frame = frame.f_back
os.write(frame.f_locals["reply_fd"], {frame!r})
"""
FORGED = {**HONEST_REPLY, "stdout": "forged\n", "exit_code": 7}
LIMITS = Limits(wall_time_s=5, max_output_bytes=64 * 1024)


def hostile(kind: bytes, payload: bytes) -> str:
    return HOSTILE_CELL.format(frame=wire.frame(kind, payload))


@pytest.fixture
def manager(session_backend: Backend) -> Iterator[SessionManager]:
    # The sandbox's uid binds a workspace below this folder: its parents must be traversable.
    root = tempfile.mkdtemp(prefix="undoable-wire-")
    os.chmod(root, 0o711)
    config = SessionConfig(root_dir=os.path.join(root, "sessions"), limits=LIMITS)
    manager = SessionManager(config, session_backend)
    yield manager
    manager.shutdown()
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    ("cell", "error"),
    [
        (hostile(b"c", marshal.dumps(FORGED)), "sandbox sent a malformed JSON b'c' frame"),
        (hostile(b"c", b"{not json"), "sandbox sent a malformed JSON b'c' frame"),
        (hostile(b"s", json.dumps(FORGED).encode()), "sandbox sent a frame of kind b's'"),
        (hostile(b"r", b""), "sandbox sent a frame of kind b'r'"),
        (hostile(b"c", json.dumps({**FORGED, "pwned": 1}).encode()), "of the wrong shape"),
        (
            HOSTILE_CELL.format(frame=b"c" + (2**32 - 1).to_bytes(4, "big")),
            "the session's reply was larger than",
        ),
    ],
)
def test_deny_a_cell_that_forges_a_reply_ends_the_session_naming_it(manager, cell, error):
    session = manager.create()
    result = session.exec(cell)
    assert error in result.stderr
    assert (result.exit_code, result.stdout) == (None, "")
    assert session.closed_reason == "died"


def test_an_honest_cell_after_the_ready_frame_still_works(manager):
    session = manager.create()
    assert session.exec("1 + 1").stdout == "2\n"


@pytest.mark.sabotage
def test_sabotage_without_the_checks_a_forged_reply_of_another_kind_gets_through(
    manager, monkeypatch
):
    monkeypatch.setattr(wire, "CHECKS_ON", False)
    session = manager.create()
    result = session.exec(hostile(b"s", json.dumps(FORGED).encode()))
    assert (result.exit_code, result.stdout) == (7, "forged\n")


@pytest.mark.sabotage
def test_sabotage_a_host_that_unmarshals_takes_the_forged_reply(manager, monkeypatch):
    monkeypatch.setattr(wire, "parse_json", lambda kind, body, shape: marshal.loads(body))
    session = manager.create()
    result = session.exec(hostile(b"c", marshal.dumps(FORGED)))
    assert (result.exit_code, result.stdout) == (7, "forged\n")


# A stateless bwrap sandbox whose supervisor reports, in marshal, a forged status: exit 0 for a
# program that exits 3. The program itself cannot reach the status pipe (its supervisor is PID 1
# and closes it in the program's process), so the supervisor's source is what is changed here.
HONEST_STATUS = (
    """    _write_all(status_fd, _frame(b"s", b'{"wait_status": %d, "cpu_us": %d}' % """
    "(status, cpu_us)))\n"
)
FORGED_STATUS = (
    """    _write_all(status_fd, _frame(b"s", marshal.dumps({"wait_status": 0, "cpu_us": 0})))\n"""
)


def run_with_a_forged_status(
    monkeypatch: pytest.MonkeyPatch, *, host_unmarshals: bool = False
) -> RunResult:
    # Made first: its self-test at start runs the honest supervisor.
    backend = executor.create_backend(
        "bwrap", rootfs=str(ROOTFS), warm_pool_size=0, zygote=False, pool_limits=TEST_LIMITS
    )
    source = bwrap_args.driver_source()
    assert HONEST_STATUS in source
    forged = source.replace(HONEST_STATUS, FORGED_STATUS)
    monkeypatch.setattr(bwrap_args, "driver_source", lambda: forged)
    # The payload is cached per root filesystem: each sandbox now gets one made afresh.
    monkeypatch.setattr(pool, "driver_payload", bwrap_args.driver_payload.__wrapped__)
    if host_unmarshals:  # the sabotage: the host's check replaced by marshal
        monkeypatch.setattr(wire, "parse_json", lambda kind, body, shape: marshal.loads(body))
    try:
        return backend.run(RunSpec(code="raise SystemExit(3)"), limits=TEST_LIMITS)
    finally:
        backend.close()


def test_deny_a_supervisor_status_in_marshal_fails_the_run_naming_it(monkeypatch):
    result = run_with_a_forged_status(monkeypatch)
    assert (result.exit_code, result.ok) == (None, False)
    assert "The host refused the sandbox's status: sandbox sent a malformed JSON b's' frame" in (
        result.stderr
    )
    assert result.stderr.endswith(SUPERVISOR_LOST + "\n"), result.stderr


@pytest.mark.sabotage
def test_sabotage_a_host_that_unmarshals_the_status_takes_the_forged_exit(monkeypatch):
    result = run_with_a_forged_status(monkeypatch, host_unmarshals=True)
    assert (result.exit_code, result.ok) == (0, True)
