"""The node as ``kata-mem serve`` keeps it (:mod:`kata_mem.interfaces.node_view`): each
entry of the state directory read as ``status --all`` reads it, read again only when the
kernel reports a change (or, in a full pass, when its files moved), and the node's status
from it equal to the one read from the files, refusals included."""

from __future__ import annotations

import asyncio
import json
import select
from collections.abc import Awaitable, Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import TypeVar

import pytest

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError
from kata_mem.core.model import Settings
from kata_mem.core.record import LastOutcome, Record
from kata_mem.edges.journal import SandboxState, vm_owner
from kata_mem.interfaces.node_view import UNKNOWN, NodeView, read_entry
from kata_mem.interfaces.render_node import node_status_json
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


def _saved(state: Path, name: str, backend: dict[str, object]) -> None:
    """A sandbox whose saved request leads to ``backend`` (as a first apply saves it)."""
    sandbox = SandboxState(state, name)
    with sandbox.locked(0):
        sandbox.save(Record(name, observed=512 * MiB))
        doc = {"schema": "kata-mem/shim-request/v1", "sandbox_id": name, "event": "update"}
        sandbox.save_request({**doc, "backend": backend, "apply": True})


def _qmp(inode: int, pid: int = 4242) -> dict[str, object]:
    vmm = {"device": 7, "inode": inode, "owner_uid": 0, "peer_uid": 0, "peer_pid": pid}
    return {"type": "qmp", "socket": f"/run/vm-{inode}.sock", "vmm": vmm}


def test_the_view_says_who_owns_a_vm_as_the_files_do_and_reads_a_request_saved_just_before(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    _saved(state, "a", _qmp(10))
    _saved(state, "b", {"type": "libvirt", "uri": "qemu:///system", "domain": "d1"})
    _saved(state, "c", _qmp(20))
    (state / "c" / "journal.json").chmod(0o666)  # refused: passed over, as by the files
    _saved(state, "d", _qmp(30))
    (state / "d" / "request.json").write_text("{not json")  # unreadable: passed over
    _sandbox(state, "e", 512)  # a request without the VMM it led to
    view = NodeView(str(state))

    def reached(backend: dict[str, object]) -> Endpoint:
        return Endpoint.from_json(backend)

    asked = [
        ("new", reached(_qmp(10))),
        ("a", reached(_qmp(10))),  # a sandbox's own request is no other owner
        ("new", reached(_qmp(20))),
        ("new", reached(_qmp(30))),
        ("new", reached(_qmp(99))),
        # a's socket file is gone and a new VM's got its inode number: another listener
        ("new", reached(_qmp(10, pid=5353))),
        ("new", reached({"type": "libvirt", "uri": "qemu:///system", "domain": "d1"})),
        ("new", reached({"type": "libvirt", "uri": "qemu:///system", "domain": "d2"})),
        ("new", reached({"type": "qmp", "socket": "/run/e.sock"})),
    ]

    async def body() -> None:
        answers = [await view.vm_owner(n, e, _inline) for n, e in asked]
        assert answers == [vm_owner(state, n, e) for n, e in asked]
        assert answers == ["a", None, None, None, None, None, "b", None, None]
        # Saved by another process just now, nothing synced since: in the answer.
        _saved(state, "f", _qmp(40))
        assert await view.vm_owner("new", reached(_qmp(40)), _inline) == "f"
        (state / "f" / "request.json").unlink()  # forgotten: no longer the owner
        assert await view.vm_owner("new", reached(_qmp(40)), _inline) is None
        assert vm_owner(state, "new", reached(_qmp(40))) is None

    _run(view, body)


def test_without_a_view_that_can_answer_the_owner_is_read_from_the_files(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _saved(state, "a", _qmp(10))
    view = NodeView(str(state))
    endpoint = Endpoint.from_json(_qmp(10))
    # Not started (no loop, no inotify): the caller reads the files.
    assert view.vm_owner_from_thread(state, "new", endpoint, _inline) is UNKNOWN

    async def body() -> None:
        assert await view.vm_owner("new", endpoint, _inline) == "a"
        # Asked on the loop itself (it would wait for itself), or for another directory.
        assert view.vm_owner_from_thread(state, "new", endpoint, _inline) is UNKNOWN
        other = tmp_path / "other"
        assert view.vm_owner_from_thread(other, "new", endpoint, _inline) is UNKNOWN
        # From a thread, while the loop runs: the view's answer.
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(
            None, lambda: view.vm_owner_from_thread(state, "new", endpoint, _inline)
        )
        assert found == "a"

    _run(view, body)


def test_the_node_document_is_the_files_document_made_again_only_on_a_change(state: Path) -> None:
    """GET /v1/node's body from memory: ``json.dumps`` of what ``status --all`` reads from
    the files, byte for byte (a backend with its VMM, a libvirt one, none, a name to escape),
    the same bytes while nothing changed, and the new state once something did."""
    _saved(state, "q", _qmp(10))
    _saved(state, "v", {"type": "libvirt", "uri": "qemu:///system", "domain": 'd\u00e9"1'})
    settings = Settings(node_overcommit=Fraction(1))
    view = NodeView(str(state))

    def files() -> bytes:
        return (json.dumps(node_status_json(node_status(settings, str(state)))) + "\n").encode()

    async def body() -> None:
        entries = await view.current(_inline)
        assert entries is not None
        first = view.document(settings, entries)
        assert first == files()
        assert json.loads(first)["sandboxes"][0]["sandbox"] == "a"
        again = await view.current(_inline)
        assert again is entries and view.document(settings, again) is first  # not made again
        _sandbox(state, "b", 4096)
        changed = await view.current(_inline)
        assert changed is not None and changed is not entries
        now = view.document(settings, changed)
        assert now != first and now == files()
        # Another user could write a sandbox's directory: refused, as from the files.
        (state / "a").chmod(0o777)
        refused = await view.current(_inline)
        assert refused is not None
        with pytest.raises(ConfigError, match="a"):
            view.document(settings, refused)

    _run(view, body)
