"""The httpx client against the live server: typed errors, output split by stream as it comes,
and an asyncio flavour that is asyncio all the way down (no worker threads)."""

from __future__ import annotations

import asyncio

import pytest
from undoable_client import (
    ApiError,
    AsyncClient,
    AuthError,
    BadRequest,
    Client,
    Conflict,
    NotFound,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("threads_runner", "workspaces_root", "sessions"),
]


@pytest.fixture
def client(app_server, owner) -> Client:
    return Client(app_server, owner.token)


def test_each_refusal_raises_the_error_that_names_it(client, app_server):
    cases = [
        (lambda: Client(app_server, "udb_wrong").exec("1"), AuthError, 401),
        (lambda: client.exec("1", language="cobol"), BadRequest, 400),
        (lambda: client.get_action(999_999), NotFound, 404),
    ]
    for call, error, status in cases:
        with pytest.raises(error) as refused:
            call()
        assert isinstance(refused.value, ApiError) and refused.value.status == status
    action = client.action("fs", "open('a', 'w').write('a')")
    action.discard()
    with pytest.raises(Conflict):
        action.discard()


def test_output_streams_to_on_stdout_and_on_stderr_apart(client):
    out: list[str] = []
    err: list[str] = []
    code = "import sys\nprint('to out', flush=True)\nprint('to err', file=sys.stderr)\n"
    action = client.action("python", code, on_stdout=out.append, on_stderr=err.append)
    assert (action.status, "".join(out), "".join(err)) == ("succeeded", "to out\n", "to err\n")


def test_a_session_lists_and_reads_its_files(client):
    with client.session() as session:
        session.write_file("d/a.txt", "hi")
        assert [e["name"] for e in session.list_files("d")] == ["a.txt"]
        assert client.get_session(session.id).read_file("d/a.txt") == b"hi"
    with pytest.raises(NotFound):
        session.read_file("d/a.txt")


def test_the_async_client_streams_keeps_and_uses_no_worker_thread(app_server, owner, monkeypatch):
    def no_threads(*args: object, **kwargs: object) -> None:
        raise AssertionError("the async client ran something on a worker thread")

    monkeypatch.setattr(asyncio, "to_thread", no_threads)

    async def main() -> tuple[str, str, str, bytes]:
        async with AsyncClient(app_server, owner.token) as client:
            seen: list[str] = []
            code = "print('w', flush=True)\nopen('a.txt', 'w').write('a')"
            action = await client.action("fs", code, on_stdout=seen.append)
            before = action.status
            await action.keep()
            workspace = await client.workspace(action.workspace)
            async with await client.session() as session:
                await session.exec("x = 40")
                assert (await session.exec("x + 2")).stdout == "42\n"
            return before, action.status, "".join(seen), await workspace.read_file("a.txt")

    assert asyncio.run(main()) == ("pending", "kept", "w\n", b"a")


def test_a_workspace_downloads_as_a_tar_for_its_owner_only(client, app_server, stranger):
    import io
    import tarfile

    workspace = client.workspace()
    workspace.write_file("d/a.txt", "a")
    raw = client.request("GET", f"/workspaces/{workspace.id}/tar")
    with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
        assert sorted(m.name for m in archive.getmembers()) == ["d", "d/a.txt"]
        assert archive.extractfile("d/a.txt").read() == b"a"  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        Client(app_server, stranger.token).request("GET", f"/workspaces/{workspace.id}/tar")
