"""A run's images end to end on both backends: matplotlib figures left open and files written
to the output folder come back on the result, as the host accepted them; what the sandbox makes
of the folder (a symlink, an HTML page named .svg, a FIFO) is left out, named. Sessions return
the images each cell made, like Jupyter's inline backend.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

import executor
from executor.backends.base import Backend
from executor.backends.docker import wire
from executor.errors import BackendUnavailable
from executor.images import ImageCaps
from executor.limits import Limits
from executor.sessions.config import SessionConfig
from executor.sessions.manager import SessionManager
from executor.spec import RunSpec
from tests.prerequisites import SANDBOX_IMAGE

LIMITS = Limits(wall_time_s=30, memory_mib=512)
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nprint('drawn')\n"


THOUSAND = (
    "import os\nos.mkdir('output')\n"
    "png = b'\\x89PNG\\r\\n\\x1a\\n'\n"
    "open('output/0000-big.png', 'wb').write(png + bytes(3 * 1024 * 1024))\n"
    "for n in range(1, 1000):\n"
    "    open(f'output/{n:04}.png', 'wb').write(png)\n"
)


@pytest.fixture(scope="module", params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def each_backend(
    request: pytest.FixtureRequest,
    sandbox_rootfs: Path,
    docker_missing: Callable[[str], NoReturn],
) -> Iterator[Backend]:
    """Each real backend in turn."""
    if request.param == "bwrap":
        backend = executor.create_backend("bwrap", rootfs=str(sandbox_rootfs))
    else:
        try:
            backend = executor.create_backend(
                "docker", image=SANDBOX_IMAGE, warm_pool_size=1, limits=LIMITS
            )
        except BackendUnavailable as exc:
            docker_missing(f"the docker backend is unavailable: {exc}")
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def docker_backend(docker_missing: Callable[[str], NoReturn]) -> Iterator[Backend]:
    """Docker's container per run, whose images travel in wire.py's frames."""
    try:
        backend = executor.create_backend(
            "docker", image=SANDBOX_IMAGE, warm_pool_size=0, limits=LIMITS, zygote=False
        )
    except BackendUnavailable as exc:
        docker_missing(f"the docker backend is unavailable: {exc}")
    yield backend
    backend.close()


def test_an_open_matplotlib_figure_comes_back_as_a_png(each_backend: Backend) -> None:
    result = each_backend.run(RunSpec(code=PLOT), limits=LIMITS)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "drawn\n", "")
    assert [(i.name, i.mime) for i in result.images] == [("figure-1.png", "image/png")]
    assert result.images[0].data.startswith(b"\x89PNG")


def test_files_in_the_output_folder_come_back_and_tricks_are_named(each_backend: Backend) -> None:
    code = (
        "import os\n"
        "out = os.environ['UNDOABLE_OUTPUT_DIR']\n"
        "os.makedirs(out, exist_ok=True)\n"
        "open(f'{out}/a.svg', 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')\n"
        "os.symlink('/etc/passwd', f'{out}/b.png')\n"
        "open(f'{out}/c.svg', 'w').write('<html><script>alert(1)</script></html>')\n"
        "os.mkfifo(f'{out}/d.png')\n"
    )
    result = each_backend.run(RunSpec(code=code), limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    assert [(i.name, i.mime) for i in result.images] == [("a.svg", "image/svg+xml")]
    assert result.image_notes == (
        "image_file: left out b.png, d.png: not a regular file "
        "(symlinks, folders and FIFOs are never read)",
        "image_type: left out c.svg: not a PNG, JPEG, GIF or SVG image",
    )


def test_a_thousand_files_and_a_huge_one_are_capped(each_backend: Backend) -> None:
    result = each_backend.run(RunSpec(code=THOUSAND), limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    assert [i.name for i in result.images] == [f"{n:04}.png" for n in range(1, 8)]
    assert result.image_notes == (
        "image_bytes: left out 0000-big.png: larger than 2 MiB per image",
        "image_count: left out 992 more: past the first 8 files of the output folder",
    )


@pytest.mark.docker
def test_an_image_larger_than_a_frame_comes_back_whole_from_docker(docker_backend: Backend) -> None:
    code = (
        "import os\nos.mkdir('output')\n"
        "open('output/tall.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(1536 * 1024))\n"
    )
    result = docker_backend.run(RunSpec(code=code), limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    assert [(i.name, len(i.data)) for i in result.images] == [("tall.png", 8 + 1536 * 1024)]


@pytest.mark.docker
@pytest.mark.sabotage
def test_sabotage_without_docker_caps_a_thousand_files_and_a_huge_one_come_back(
    docker_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = 1 << 30
    caps = ImageCaps(max_count=10_000, max_image_bytes=big, max_total_bytes=big)
    monkeypatch.setattr(wire, "IMAGE_CAPS", caps)
    result = docker_backend.run(RunSpec(code=THOUSAND), limits=LIMITS)
    assert result.exit_code == 0, result.stderr
    assert len(result.images) == 1000
    assert len(result.images[0].data) == 8 + 3 * 1024 * 1024
    assert result.image_notes == ()


@pytest.fixture
def sessions(session_backend: Backend) -> Iterator[SessionManager]:
    root = tempfile.mkdtemp(prefix="undoable-sessions-")
    os.chmod(root, 0o711)  # the sandbox's uid must reach its workspace
    manager = SessionManager(SessionConfig(root_dir=f"{root}/s", limits=LIMITS), session_backend)
    yield manager
    manager.shutdown()
    shutil.rmtree(root)


def test_a_session_returns_each_cells_figures(sessions: SessionManager) -> None:
    session = sessions.create()
    first = session.exec(PLOT)
    assert [i.name for i in first.images] == ["figure-1.png"], first.stderr
    assert session.exec("x = 1").images == ()
    again = session.exec("plt.plot([3, 2, 1]); plt.title('down')")
    assert [i.name for i in again.images] == ["figure-1.png"]
    assert again.images[0].data != first.images[0].data


def test_a_session_cell_leaves_a_symlink_to_a_system_file_out(sessions: SessionManager) -> None:
    session = sessions.create()
    code = (
        "import os\nout = os.environ['UNDOABLE_OUTPUT_DIR']\nos.makedirs(out)\n"
        "os.symlink('/etc/passwd', f'{out}/out.png')\n"
    )
    result = session.exec(code)
    assert result.exit_code == 0, result.stderr
    assert result.images == ()
    assert result.image_notes == (
        "image_file: left out out.png: not a regular file "
        "(symlinks, folders and FIFOs are never read)",
    )
