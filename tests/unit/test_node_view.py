"""The node as ``kata-mem serve`` keeps it (:mod:`kata_mem.interfaces.node_view`): each
entry of the state directory read as ``status --all`` reads it, read again only when the
kernel reports a change (or, in a full pass, when its files moved), and the node's status
from it equal to the one read from the files, refusals included."""

from __future__ import annotations

import asyncio
import select
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.model import Settings
from kata_mem.core.record import LastOutcome, Record
from kata_mem.edges.journal import SandboxState
from kata_mem.interfaces.node_view import NodeView, read_entry
from kata_mem.orchestration.status import node_status

MiB = 1 << 20
T = TypeVar("T")


def _sandbox(state: Path, name: str, observed: int, request: bool = True) -> SandboxState:
    sandbox = SandboxState(state, name)
    with sandbox.locked(0):
        sandbox.save(
            Record(
                name,
                observed=observed * MiB,
                last_outcome=LastOutcome("Resized", "", "", 1.0),
            )
        )
        if request:
            doc = {"schema": "kata-mem/shim-request/v1", "sandbox_id": name, "event": "update"}
            sandbox.save_request(
                {**doc, "backend": {"type": "qmp", "socket": f"/run/{name}.sock"}, "apply": True}
            )
    return sandbox


async def _inline(fn: Callable[[], T]) -> T:
    return fn()


def _run(view: NodeView, body: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        view.start(asyncio.get_running_loop(), lambda: None)
        try:
            return await body()
        finally:
            view.close()

    return asyncio.run(main())


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "state"
    _sandbox(root, "a", 512)
    _sandbox(root, "b", 1024)
    (root / "not-ours.txt").write_text("someone else's")
    yield root


def test_an_entry_is_read_again_only_when_what_a_reader_checks_moved(state: Path) -> None:
    first = read_entry(state, "a")
    assert first is not None and first.kind == "ours" and first.has_request
    assert first.files is not None and first.files.record.observed == 512 * MiB
    assert read_entry(state, "a", first) is first  # nothing moved: not read again
    _sandbox(state, "a", 768)
    again = read_entry(state, "a", first)
    assert again is not None and again is not first
    assert again.files is not None and again.files.record.observed == 768 * MiB
    (state / "a" / "journal.json").chmod(0o666)  # its mode alone: read, and refused
    refused = read_entry(state, "a", again)
    assert refused is not None and refused.kind == "refused" and refused.refused is not None
    foreign = read_entry(state, "not-ours.txt")
    assert foreign is not None and foreign.kind == "foreign"
    assert read_entry(state, ".kata-mem-state") is None  # kata-mem's own: never listed
    assert read_entry(state, "gone") is None


def test_the_view_answers_what_the_files_say(state: Path) -> None:
    settings = Settings()
    view = NodeView(str(state))

    async def body() -> None:
        await view.sync(_inline)
        assert view.ready and view.take_changed() == {"a", "b", "not-ours.txt"}
        assert view.status(settings, view.published()) == node_status(settings, str(state))

    _run(view, body)


def test_a_change_by_another_writer_is_read_from_the_kernels_event_alone(state: Path) -> None:
    settings = Settings()
    view = NodeView(str(state))

    async def body() -> None:
        await view.sync(_inline)
        view.take_changed()
        assert view.inotify is not None
        await view.sync(_inline)
        assert view.take_changed() == set()  # nothing happened: nothing read
        _sandbox(state, "b", 2048)  # as the shim answering in its own process would
        _sandbox(state, "c", 256)  # a new sandbox
        assert select.select([view.inotify.fd], [], [], 5)[0]
        await view.sync(_inline)
        assert view.take_changed() == {"b", "c"}
        assert view.status(settings, view.published()) == node_status(settings, str(state))
        # Another user could write b's directory now: refused as the listing refuses it.
        (state / "b").chmod(0o777)
        assert select.select([view.inotify.fd], [], [], 5)[0]
        await view.sync(_inline)
        with pytest.raises(ConfigError, match="b"):
            view.status(settings, view.published())
        with pytest.raises(ConfigError, match="b"):
            node_status(settings, str(state))
        (state / "b").chmod(0o700)
        SandboxState(state, "c").remove(0)  # removed: gone from the view
        assert select.select([view.inotify.fd], [], [], 5)[0]
        await view.sync(_inline)
        assert "c" not in view.entries
        assert view.status(settings, view.published()) == node_status(settings, str(state))

    _run(view, body)


def test_without_inotify_every_entry_is_read_at_each_sync(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kata_mem.edges import watch

    def none() -> watch.Inotify:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(watch, "Inotify", none)
    view = NodeView(str(state))

    async def body() -> None:
        await view.sync(_inline)
        view.take_changed()
        assert view.inotify is None
        _sandbox(state, "a", 640)
        await view.sync(_inline)  # no event: read anyway
        assert view.take_changed() == {"a"}
        assert await view.current(_inline) is None  # GET /v1/node reads the files then

    _run(view, body)
