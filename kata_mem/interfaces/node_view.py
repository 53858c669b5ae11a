"""The node as ``kata-mem serve`` keeps it in memory: what each entry of the state
directory holds (read as ``status --all`` reads it), which VMs the kernel watches for
their exit, and which sandboxes changed since they were last read.

Nothing here is read again on a timer. The kernel says what changed:

- inotify(7) on the state directory (a sandbox directory made, removed or changed in
  mode or owner, the node's ledger written) and on each sandbox directory (its journal
  or saved request replaced, a file's mode or owner changed): whoever wrote it, this
  service, the shim answering in its own process, a ``kata-mem apply`` or an operator;
- a pidfd on each VM's QEMU, the process listening on its monitor socket when kata-mem
  last applied (``backend.vmm.peer_pid`` of its saved request), readable once it exits;
  and inotify on the socket file itself (removed, or bound again by another process).

A changed entry is read again in full, with every check a reader makes (the directory
kata-mem's and no other user's, the journal's and the request's owner and mode: the
ownership proofs of docs/design/state.md); an event is only a reason to read, never a
fact. When the kernel cannot tell (no inotify, a watch refused at
``fs.inotify.max_user_watches``, a VM without a pid in this namespace, a libvirt domain,
Linux before 5.3 without pidfds), that sandbox is read, and its VM asked, at every
interval as before; a queue overflow makes everything read again.

:class:`NodeView` is used from the event loop only (its reads run in a thread of their
own, its results are applied on the loop), but for :meth:`NodeView.published`, an
immutable tuple a pool thread may read, and :meth:`NodeView.vm_owner_from_thread`, which
a pool thread asks and the loop answers.

What the service answers from the view is here too: ``GET /v1/node``'s body
(:meth:`NodeView.document`) and which sandbox owns a VM (:meth:`NodeView.vm_owner`). One
module (about 620 lines) because all of it reads and keeps one state: the entries, what
is left to read, the VMs watched, and the snapshot last published.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Final,
    Literal,
    NamedTuple,
    Optional,
    Protocol,
    TypeVar,
    Union,
)

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.edges import watch
from kata_mem.edges.statefiles import JOURNAL, LOCK, REQUEST, SANDBOX_MARKER
from kata_mem.orchestration.status import Row, SandboxFiles, node_totals, read_sandbox, summary

if TYPE_CHECKING:
    from kata_mem.core.endpoint import Endpoint
    from kata_mem.core.model import HostFacts, Settings
    from kata_mem.core.results import NodeStatus

T = TypeVar("T")
#: A file's identity and what a change to it changes (inode, mtime, size, mode, owner).
Stat = Optional[tuple[int, int, int, int, int]]
#: An entry's directory and the files a reader checks (journal, saved request, lock,
#: marker): a full pass reads again only an entry whose signature moved.
Signature = tuple[Stat, Stat, Stat, Stat, Stat]
#: The files of a sandbox directory whose change the view reads (the lock only for its
#: mode and owner: every call opens and closes it).
_READ_ON = (JOURNAL, REQUEST, SANDBOX_MARKER, "")


#: How long a request's owner check waits for the view (its own reading included: every
#: entry after a queue overflow) before it reads the files instead, as a one-shot call does.
OWNER_WAIT_S = 10.0


class Unknown:
    """What :meth:`NodeView.vm_owner` answers when the view cannot say."""


UNKNOWN: Final = Unknown()


class Run(Protocol):
    """Runs a function off the event loop, in the view's own thread (:meth:`Service.read_view`)."""

    def __call__(self, fn: Callable[[], T], /) -> Awaitable[T]: ...


class Entry(NamedTuple):
    """One entry of the state directory as last read: a sandbox directory of kata-mem's
    (``files``), one refused because another user could have written it (``refused``:
    the error a reader raises), or anything else (``foreign``: listed as not
    kata-mem's)."""

    kind: Literal["ours", "refused", "foreign"]
    files: Optional[SandboxFiles]
    refused: Optional[KataMemError]
    signature: Signature
    #: Whether a ``request.json`` was there (the loop re-runs it; without one, the
    #: sandbox is forgotten or said to be skipped).
    has_request: bool
    #: Whether inotify watches its directory (else it is read at every interval).
    watched: bool
    #: Its part of the node's status, against the host as probed when it was read.
    row: Optional[Row] = None
    #: The backend of its saved request, as :func:`~kata_mem.edges.journal.vm_owner`
    #: weighs it (a sandbox directory of kata-mem's, its journal refused or not).
    saved: Optional[Endpoint] = None
    #: ``row``'s entry of ``GET /v1/node``'s ``sandboxes``, encoded as the service encodes
    #: the document (:func:`row_json`): made when it is read, not at each request.
    row_json: Optional[str] = None


def _stat(path: str) -> Stat:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, st.st_uid)


def signature(directory: Path) -> Signature:
    """What a full pass compares to tell whether an entry changed without reading it.
    Paths as strings: the safety net makes five of these a sandbox, and a ``pathlib`` join
    cost more than the ``stat`` itself."""
    d = str(directory)
    return (
        _stat(d),
        _stat(f"{d}/{JOURNAL}"),
        _stat(f"{d}/{REQUEST}"),
        _stat(f"{d}/{LOCK}"),
        _stat(f"{d}/{SANDBOX_MARKER}"),
    )


def read_entry(
    root: Path,
    name: str,
    known: Optional[Entry] = None,
    inotify: Optional[watch.Inotify] = None,
    limit: int = 0,
) -> Optional[Entry]:
    """Read the entry ``name`` of the state directory ``root`` (kata-mem's; call it with
    the node lock held, as a listing is made), or None when it is not one a listing
    shows (kata-mem's own files) or is gone. ``known``: what was read before, returned as
    it is when nothing a reader checks has moved since. ``inotify``: watch the sandbox
    directory first, so that a change made while it is read is not missed. ``limit``:
    the host's memory, to sum its row against (0: not now).
    """
    from kata_mem.core.model import SANDBOX_ID
    from kata_mem.edges.journal import SandboxState, saved_backend
    from kata_mem.edges.statedir import entry

    directory = root / name
    watched = False
    if inotify is not None and SANDBOX_ID.fullmatch(name):
        with contextlib.suppress(watch.WatchFailed):
            inotify.add(str(directory), watch.DIR_CHANGES, ("sandbox", name))
            watched = True
    sig = signature(directory)
    if known is not None and known.signature == sig and known.watched == watched:
        return known
    found, why = entry(root, name)
    if found in ("own", "absent") or (found != "ours" and not os.path.lexists(directory)):
        return None
    if found == "refused":
        return Entry("refused", None, why, sig, False, watched)
    if found != "ours":  # foreign, empty, or changed while it was read (read again then)
        # What a listing shows of it, its name, changes only with an event on the state
        # directory: watched as that is (a file is no directory to watch).
        return Entry("foreign", None, None, sig, False, inotify is not None)
    try:
        files = read_sandbox(str(root), name)
    except KataMemError as exc:  # its journal could have been written by another user
        # Its saved request still says which VM it sizes, as vm_owner reads it.
        saved = saved_backend(SandboxState(root, name))
        return Entry("refused", None, exc, sig, False, watched, saved=saved)
    row = summary(files, limit) if limit else None
    text = None if row is None else row_json(row)
    return Entry("ours", files, None, sig, sig[2] is not None, watched, row, files.endpoint, text)


def row_json(row: Row) -> str:
    """A sandbox's entry of ``kata-mem/node/v1``'s ``sandboxes``, as ``json.dumps`` writes
    it in the service's one line of JSON."""
    from kata_mem.interfaces.render_node import sandbox_summary_json

    return json.dumps(sandbox_summary_json(row.summary))


def node_document(node: NodeStatus, rows: list[str]) -> bytes:
    """The body of ``GET /v1/node``: ``json.dumps(node_status_json(node))`` and a newline,
    byte for byte, from each sandbox's row encoded already (``rows``, in ``node``'s order:
    :attr:`Entry.row_json`), so that only what changed is encoded again. ``json.dumps``
    writes a dict as its items joined by ``", "``, each a key and a value encoded on their
    own joined by ``": "`` (Lib/json/encoder.py ``_iterencode_dict``), so the document's
    other items are encoded as it would."""
    from kata_mem.core.values import replace
    from kata_mem.interfaces.render_node import node_status_json

    doc = node_status_json(replace(node, sandboxes=()))
    listed = "[" + ", ".join(rows) + "]"
    items = (
        f"{json.dumps(key)}: {listed if key == 'sandboxes' else json.dumps(value)}"
        for key, value in doc.items()
    )
    return ("{" + ", ".join(items) + "}\n").encode()


class Vm(NamedTuple):
    """A VM the kernel watches: its monitor socket and its watch, and QEMU's pid."""

    socket: str
    pid: int
    wd: int


class NodeView:
    """The entries of one state directory, kept as the kernel reports their changes."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.root = Path(state_dir)
        self.entries: dict[str, Entry] = {}
        #: None: no inotify (or not started): every entry is read at every interval.
        self.inotify: Optional[watch.Inotify] = None
        self.root_wd: Optional[int] = None
        #: Entries read in full once, with the state directory watched since before.
        self.ready = False
        #: Entries to read again, and whether all of them are (a queue overflow).
        self.dirty: set[str] = set()
        self.everything = True
        #: The VMs the kernel watches, and one pidfd per QEMU pid.
        self.vms: dict[str, Vm] = {}
        self._pids: dict[int, tuple[int, set[str]]] = {}
        #: Sandboxes whose VM the kernel says went (or whose socket changed).
        self.gone: set[str] = set()
        #: Whether anything changed since the ledger was last checked.
        self.changed = True
        #: The names whose entry changed since the loop last took them (:meth:`take_changed`).
        self.changed_names: set[str] = set()
        #: Serializes reading and applying (the loop and GET /v1/node); made on first use,
        #: inside the running loop (Python 3.9 binds a lock to the loop it is made in).
        self._lock: Optional[asyncio.Lock] = None
        self._published: Optional[tuple[tuple[str, Entry], ...]] = None
        #: The entries last published (:meth:`current`), for a pool thread (``/metrics``).
        self.snapshot: Optional[tuple[tuple[str, Entry], ...]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._wake: Callable[[], None] = lambda: None
        #: The entries inotify does not watch (read at every sync), kept as they are read.
        self._unwatched: set[str] = set()
        #: The sandboxes whose saved request leads to each VM (its ``vm_key``), so that a
        #: first request's owner check looks at those only (:meth:`vm_owner`).
        self._owners: dict[tuple[object, ...], set[str]] = {}
        #: The last body of GET /v1/node: for which entries, settings, host and state
        #: directory (:meth:`document`).
        self._document: Optional[tuple[object, object, bytes]] = None

    # --- the kernel's side ---------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop, wake: Callable[[], None]) -> None:
        """Open the inotify instance and wake ``wake`` on each event (none: every entry is
        read, and every VM asked, at every interval, as before)."""
        self._loop, self._wake = loop, wake
        try:
            self.inotify = watch.Inotify()
        except OSError:
            self.inotify = None
            return
        loop.add_reader(self.inotify.fd, self._readable)

    def _readable(self) -> None:
        # Woken once: the reader is added again once the events are read (``drain``),
        # or the loop would call this on every turn until then.
        assert self._loop is not None and self.inotify is not None
        self._loop.remove_reader(self.inotify.fd)
        self._wake()

    def poke(self, name: str) -> None:
        """The service changed ``name`` (a request it answered): read it again. The kernel
        says so as well once the state directory is watched; before that (it did not exist
        when the service started, and this request made it) this is how the loop learns."""
        self.dirty.add(name)
        self._wake()

    def close(self) -> None:
        for name in list(self.vms):
            self.disarm(name)
        if self.inotify is not None:
            if self._loop is not None:
                self._loop.remove_reader(self.inotify.fd)
            self.inotify.close()
            self.inotify = None
        self.ready = False

    def watch_root(self) -> None:
        """Watch the state directory, if it is not watched yet and exists (a pool thread);
        from then on everything is read once again, and the view is ready after that."""
        if self.inotify is None or self.root_wd is not None:
            return
        try:
            self.root_wd = self.inotify.add(self.state_dir, watch.DIR_CHANGES, ("state", ""))
        except watch.WatchFailed:
            return
        self.everything = True

    def drain(self) -> None:
        """Take the kernel's events: what to read again, which VMs went."""
        from kata_mem.edges.statefiles import LEDGER

        inotify = self.inotify
        if inotify is None:
            return
        assert self._loop is not None
        events = inotify.read()
        self._loop.add_reader(inotify.fd, self._readable)
        for event in events:
            if event.overflow:
                self.everything = True
                continue
            if event.key is None:
                continue
            kind, sandbox = event.key
            self_gone = event.mask & (watch.IN_IGNORED | watch.IN_DELETE_SELF | watch.IN_MOVE_SELF)
            if kind == "state":
                self.changed = True
                if self_gone:  # the state directory itself went or moved: start over
                    self.root_wd, self.ready, self.everything = None, False, True
                elif event.name and event.name != LEDGER:
                    self.dirty.add(event.name)
            elif kind == "sandbox":
                if event.name == LOCK:
                    if not event.mask & watch.IN_ATTRIB:
                        continue  # opened and closed by every call: its mode and owner only
                elif event.name not in _READ_ON:
                    continue  # a temporary file, or a file no reader checks
                self.changed = True
                self.dirty.add(sandbox)
            elif kind == "socket" and sandbox in self.vms:
                self.disarm(sandbox)  # removed or replaced: asked, and watched again if there
                self.gone.add(sandbox)
                self.dirty.add(sandbox)

    def arm(self, name: str) -> bool:
        """Watch the VM of ``name``'s saved request (QMP with its QEMU's pid), unless it is
        watched already. True when a pidfd was opened now: the caller then asks the socket
        once (a visit), which proves the pid still is its listener, so that the pidfd is
        the VMM's and not a process that took a reused pid."""
        entry = self.entries.get(name)
        endpoint = entry.files.endpoint if entry is not None and entry.files else None
        vmm = endpoint.vmm if endpoint is not None and endpoint.kind == "qmp" else None
        want = None
        if endpoint is not None and vmm is not None and vmm.peer_pid is not None:
            want = (endpoint.target, vmm.peer_pid)
        have = self.vms.get(name)
        if have is not None and (have.socket, have.pid) == want:
            return False
        self.disarm(name)
        if want is None or self.inotify is None or self._loop is None:
            return False
        socket, pid = want
        fresh = pid not in self._pids
        if fresh:
            fd = watch.pidfd(pid)
            if fd is None:
                return False
            self._pids[pid] = (fd, set())
            self._loop.add_reader(fd, self._exited, pid)
        try:
            wd = self.inotify.add(socket, watch.FILE_GONE, ("socket", name))
        except watch.WatchFailed:
            self._forget_pid(pid, name)
            return False
        self._pids[pid][1].add(name)
        self.vms[name] = Vm(socket, pid, wd)
        return fresh

    def disarm(self, name: str) -> None:
        vm = self.vms.pop(name, None)
        if vm is None:
            return
        if self.inotify is not None and not any(v.wd == vm.wd for v in self.vms.values()):
            self.inotify.remove(vm.wd)
        self._forget_pid(vm.pid, name)

    def _forget_pid(self, pid: int, name: str) -> None:
        held = self._pids.get(pid)
        if held is None:
            return
        held[1].discard(name)
        if not held[1]:
            self._close_pid(pid)

    def _close_pid(self, pid: int) -> None:
        fd, _names = self._pids.pop(pid)
        if self._loop is not None:
            self._loop.remove_reader(fd)
        os.close(fd)

    def _exited(self, pid: int) -> None:
        """QEMU ``pid`` exited: its sandboxes are visited (and forgotten) now."""
        held = self._pids.get(pid)
        if held is None:
            return
        names = set(held[1])
        for name in names:
            self.disarm(name)
        if pid in self._pids:
            self._close_pid(pid)
        self.gone |= names
        self._wake()

    def watched(self, name: str) -> bool:
        """Whether the kernel tells when ``name``'s VM goes and its files change."""
        entry = self.entries.get(name)
        return name in self.vms and entry is not None and entry.watched

    # --- reading -------------------------------------------------------------------------

    def lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def take_changed(self) -> set[str]:
        """The names whose entry changed since the last call (read by whoever synced)."""
        names, self.changed_names = self.changed_names, set()
        return names

    async def current(self, run: Run) -> Optional[tuple[tuple[str, Entry], ...]]:
        """The entries as they are now (every change the kernel reported so far read), or
        None while the view cannot answer (not read in full yet, the state directory not
        watched, or unusable: the caller reads the files, which says why)."""
        if not await self._synced(run):
            return None
        self.snapshot = self.published()
        return self.snapshot

    async def _synced(self, run: Run) -> bool:
        """Read every change the kernel reported so far; False while the view cannot
        answer (as :meth:`current`)."""
        if self.inotify is None:
            return False
        async with self.lock():
            try:
                await self.sync(run)
            except KataMemError:
                return False
        return self.ready and self.inotify is not None

    async def vm_owner(
        self, sandbox: str, reached: Endpoint, run: Run
    ) -> Union[str, Unknown, None]:
        """:func:`~kata_mem.edges.journal.vm_owner` from the entries as they are now (every
        change the kernel reported so far read first, so a request saved before this call
        began is in the answer), by the same rule (:func:`~kata_mem.edges.journal.owner_among`)
        over the entries whose saved request has the VM's key (an index kept as they are
        read: nothing here grows with the node); ``UNKNOWN`` while the view cannot answer
        (the caller reads the files)."""
        from kata_mem.edges.journal import owner_among, vm_key

        if not await self._synced(run):
            return UNKNOWN
        key = vm_key(reached)
        names = sorted(self._owners.get(key, ())) if key is not None else []
        return owner_among(sandbox, reached, ((n, self.entries[n].saved) for n in names))

    def vm_owner_from_thread(
        self, root: Path, sandbox: str, reached: Endpoint, run: Run
    ) -> Union[str, Unknown, None]:
        """:meth:`vm_owner`, asked from a thread of the service's pool (a request's first
        apply, which holds the sandbox's lock and the VM's monitor): answered on the loop
        within ``OWNER_WAIT_S``. ``UNKNOWN`` when it cannot be (another state directory, no
        loop, the loop stopping, asked on the loop itself): the caller reads the files.
        ``run`` must not be the pool the asking thread is in: the view's reading waits for
        it while that thread waits for the answer."""
        loop = self._loop
        if loop is None or root != self.root:
            return UNKNOWN
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is loop:
                return UNKNOWN  # would wait for itself
        try:
            future = asyncio.run_coroutine_threadsafe(self.vm_owner(sandbox, reached, run), loop)
        except RuntimeError:  # the loop is closed: the service is stopping
            return UNKNOWN
        try:
            return future.result(OWNER_WAIT_S)
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            future.cancel()  # late, or cancelled as the service stops
            return UNKNOWN

    async def sync(self, run: Run) -> None:
        """Read again what changed (and what the kernel cannot watch); the names whose
        entry changed are added to :attr:`changed_names`. ``run`` runs a function in the
        pool. Call it holding :meth:`lock`.

        :raises KataMemError: the state directory cannot be used (its own error).
        """
        self.drain()
        if self.root_wd is None:
            await run(self.watch_root)
        everything = self.everything or self.inotify is None or self.root_wd is None
        names = None if everything else self.dirty | self._unwatched
        if names is not None and not names:
            return  # nothing changed: nothing to read
        self.dirty = set()
        self.everything = False
        # What a reader compares with: only the entries it reads again, unless it reads all.
        entries = self.entries
        known = dict(entries) if names is None else {n: entries[n] for n in names if n in entries}
        inotify = self.inotify
        root = self.root

        def read() -> Optional[dict[str, Optional[Entry]]]:
            from kata_mem.edges.statedir import listdir, node_lock, state_dir_state
            from kata_mem.orchestration.handle import probe
            from kata_mem.orchestration.status import PROBED

            if state_dir_state(root) != "ours":
                return None
            limit = probe(PROBED).memory
            with node_lock(root, shared=True):  # no sandbox directory half made or removed
                wanted = set(known) | set(listdir(root, root)) if names is None else names
                return {n: read_entry(root, n, known.get(n), inotify, limit) for n in wanted}

        try:
            read_now = await run(read)
        except BaseException:
            self.everything = True  # read again, all of it, next time
            raise
        found: dict[str, Optional[Entry]] = (
            dict.fromkeys(self.entries) if read_now is None else read_now
        )
        self._apply(found, complete=names is None)

    def _index(self, name: str, before: Optional[Entry], entry: Optional[Entry]) -> None:
        """Keep :attr:`_owners` as ``name``'s entry changes from ``before`` to ``entry``."""
        from kata_mem.edges.journal import vm_key

        old = None if before is None or before.saved is None else vm_key(before.saved)
        new = None if entry is None or entry.saved is None else vm_key(entry.saved)
        if old == new:
            return
        if old is not None:
            self._owners[old].discard(name)
            if not self._owners[old]:
                del self._owners[old]
        if new is not None:
            self._owners.setdefault(new, set()).add(name)

    def _apply(self, found: dict[str, Optional[Entry]], complete: bool) -> None:
        changed = set()
        for name, entry in found.items():
            before = self.entries.get(name)
            if entry is None:
                self.entries.pop(name, None)
                self.disarm(name)
            else:
                self.entries[name] = entry
            if entry is not before:
                changed.add(name)
                self._index(name, before, entry)
                if entry is not None and not entry.watched:
                    self._unwatched.add(name)
                else:
                    self._unwatched.discard(name)
        if changed:
            self.changed = True
            self._published = None
            self.changed_names |= changed
        if complete and self.root_wd is not None:
            self.ready = True

    def published(self) -> tuple[tuple[str, Entry], ...]:
        """The entries, in name order (a listing's): an immutable snapshot."""
        if self._published is None:
            self._published = tuple(sorted(self.entries.items()))
        return self._published

    def status(self, settings: Settings, entries: tuple[tuple[str, Entry], ...]) -> NodeStatus:
        """What ``node_status`` reads from the files, from ``entries`` (a snapshot:
        :meth:`published`), against the host as probed now. The state directory's own
        checks are made again (a stat of it and its marker); a sandbox another user could
        have written is refused as the listing refuses it. For a pool thread.

        :raises ConfigError: as :func:`~kata_mem.orchestration.status.node_status`.
        """
        from kata_mem.edges.statedir import state_dir_state
        from kata_mem.orchestration.handle import probe
        from kata_mem.orchestration.status import PROBED

        return self._status(settings, entries, probe(PROBED), state_dir_state(self.root))[0]

    def document(self, settings: Settings, entries: tuple[tuple[str, Entry], ...]) -> bytes:
        """The body of ``GET /v1/node`` (:func:`node_document`) for :meth:`status`; the same
        bytes as last time while ``entries`` (:meth:`published`), the host and the state
        directory are as they were. Made on the event loop: it reads no sandbox (a stat of
        the state directory and its marker, the host's memory); at 1,000 sandboxes about
        1.5 ms when something changed, 0.2 ms when nothing did (docs/benchmarks.md, "Node
        ledger").

        :raises ConfigError: as :meth:`status`.
        """
        from kata_mem.edges.statedir import state_dir_state
        from kata_mem.orchestration.handle import probe
        from kata_mem.orchestration.status import PROBED

        key = (settings, probe(PROBED), state_dir_state(self.root))
        cached = self._document
        if cached is not None and cached[0] is entries and cached[1] == key:
            return cached[2]
        node, rows = self._status(settings, entries, key[1], key[2])
        body = node_document(node, rows)
        self._document = (entries, key, body)
        return body

    def _status(
        self,
        settings: Settings,
        entries: tuple[tuple[str, Entry], ...],
        host: HostFacts,
        state: str,
    ) -> tuple[NodeStatus, list[str]]:
        """:meth:`status`, and each sandbox's row encoded (:func:`row_json`)."""
        if state != "ours":
            entries = ()
        refused = [e.refused for _n, e in entries if e.refused is not None]
        if refused:
            raise ConfigError("; ".join(why.message for why in refused))
        rows: list[Row] = []
        texts: list[str] = []
        for _n, e in entries:
            if e.files is None:
                continue
            if e.row is not None and e.row.limit == host.memory and e.row_json is not None:
                rows.append(e.row)
                texts.append(e.row_json)
            else:
                row = summary(e.files, host.memory)
                rows.append(row)
                texts.append(row_json(row))
        foreign = [n for n, e in entries if e.kind == "foreign"]
        return node_totals(settings, self.state_dir, host, rows, foreign), texts


__all__ = ["Entry", "NodeView", "Vm", "read_entry", "signature"]
