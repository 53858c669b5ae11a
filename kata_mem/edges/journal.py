"""One sandbox's journal (the intent record, a :class:`~kata_mem.core.record.Record`) and
its saved request, read and written in its directory (:class:`SandboxState`), and which
other sandbox's saved request leads to a VM (:func:`vm_owner`, by :func:`owner_among`).

The record is written atomically (temp file, fsync, rename, fsync of the directory)
*before* every hypervisor command and again with the observed result after it. It is a
hint for recovery, never the truth about what is plugged: the hypervisor is. A missing,
truncated, corrupt or wrongly typed record is therefore replaced by what the hypervisor
reports, with a note, and nothing is lost. The sandbox directory itself (made, locked,
removed) is :mod:`kata_mem.edges.statedir`'s; the files' names, who may have written them
and how they are written are :mod:`kata_mem.edges.statefiles`'; the node's commitments
that the journals add up to are :mod:`kata_mem.edges.ledger`'s.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Optional, TypeVar

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError, InputError, KataMemError
from kata_mem.core.record import Record
from kata_mem.core.request import RequestHead, SandboxRequest, request_head
from kata_mem.core.values import replace
from kata_mem.edges.files import STATE_CAP, read_open
from kata_mem.edges.ownership import others_could_write
from kata_mem.edges.statedir import SandboxDirectory, node_lock, sandboxes
from kata_mem.edges.statefiles import (
    JOURNAL,
    READ,
    REQUEST,
    atomic_write,
    os_error_text,
    refusal,
)

#: What a saved request is read as: all of it, or only as far as its backend.
_Saved = TypeVar("_Saved", SandboxRequest, RequestHead)


class SandboxState(SandboxDirectory):
    """One sandbox's journal and saved request, in its directory (made, locked and removed
    as :class:`~kata_mem.edges.statedir.SandboxDirectory`)."""

    def __init__(self, state_dir: str | Path, sandbox: str) -> None:
        super().__init__(state_dir, sandbox)
        self.path = self.dir / JOURNAL

    def load(self, *, read_only: bool = False) -> Record:
        """The record, or a fresh one (with a warning) when it is missing or unreadable.
        ``read_only``: the caller shows it and rebuilds nothing (``status``), and its
        warning says so.

        :raises ConfigError: another user could have written it (it is not read).
        """
        then = (
            "shown as unknown; the next apply rebuilds it from the hypervisor"
            if read_only
            else "rebuilt from the hypervisor"
        )
        try:
            fd = os.open(self.path, READ)
        except FileNotFoundError:
            return Record(self.sandbox)
        except OSError as exc:
            self._warn(
                "journal", f"journal {self.path} cannot be read ({os_error_text(exc)}); {then}"
            )
            return Record(self.sandbox)
        try:
            info = os.fstat(fd)
            if others_could_write(info):
                raise refusal(self.root, self.path, info)
            try:
                raw = read_open(
                    fd, info, self.path, cap=STATE_CAP, what="journal", error=ConfigError
                )
                return Record.from_json(self.sandbox, json.loads(raw))
            except KataMemError as exc:
                self._warn("journal", f"journal unreadable ({exc.message}); {then}")
            except (ValueError, TypeError, RecursionError) as exc:
                why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                self._warn(
                    "journal", f"journal {self.path} is corrupt or truncated ({why}); {then}"
                )
        finally:
            os.close(fd)
        return Record(self.sandbox)

    def save(self, record: Record) -> Record:
        """Write ``record`` atomically and durably, stamped with the time; return what was
        written. Call it with the lock held.

        :raises ConfigError: when the state directory cannot be written.
        """
        record = record.stamped(time.time())
        atomic_write(
            self.dir, self.path, json.dumps(record.to_json(), indent=1).encode(), self.root
        )
        return record

    @property
    def request_path(self) -> Path:
        """The last request applied to this sandbox (a shim request), for ``kata-mem reconcile``."""
        return self.dir / REQUEST

    def saved_request(self) -> Optional[SandboxRequest]:
        """The last request applied to this sandbox, checked as any input is (it is input
        from disk: a libvirt URI that is not local is refused before anything it names is
        opened), or None when there is none. Reads only.

        :raises ConfigError: it cannot be read, another user could have written it, or
            it is for another sandbox.
        :raises InputError: it is not a valid request (named by its path).
        """
        return self._saved(SandboxRequest.from_json)

    def saved_endpoint(self) -> Optional[Endpoint]:
        """The backend of the last request applied to this sandbox (None: no request, or
        one without a backend), read only as far as it (:func:`request_head`): the file
        checked as :meth:`saved_request` checks it, the workload not read. Reads only.

        :raises ConfigError: as :meth:`saved_request`.
        :raises InputError: its document, sandbox or backend is not valid (named by its path).
        """
        head = self._saved(request_head)
        return None if head is None else head.endpoint

    def _saved(self, read: Callable[[bytes], _Saved]) -> Optional[_Saved]:
        """What ``read`` makes of the saved request's bytes, refused when it is for
        another sandbox.

        :raises ConfigError: as :meth:`saved_request`.
        :raises InputError: as ``read``, named by its path.
        """
        raw = self._read_request()
        if raw is None:
            return None
        try:
            saved = read(raw)
        except InputError as exc:
            raise InputError(f"{self.request_path}: {exc.message}") from exc
        if saved.sandbox != self.sandbox:
            raise ConfigError(
                f"{self.request_path}: is for sandbox {saved.sandbox!r}, not {self.sandbox!r}; "
                f"remove {self.dir} once its VM is gone"
            )
        if saved.endpoint is None:
            return saved
        return replace(saved, endpoint=replace(saved.endpoint, saved=True))

    def _read_request(self) -> Optional[bytes]:
        """The last request's bytes, or None when there is none. Reads only.

        :raises ConfigError: it cannot be read, is not a regular file, is too large, or
            another user could have written it (it is not read).
        """
        try:
            fd = os.open(self.request_path, READ)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"{self.request_path}: cannot read the saved request: {os_error_text(exc)}"
            ) from exc
        try:
            info = os.fstat(fd)
            if others_could_write(info):
                raise refusal(self.root, self.request_path, info)
            return read_open(
                fd, info, self.request_path, cap=STATE_CAP, what="saved request", error=ConfigError
            )
        finally:
            os.close(fd)

    def save_request(self, doc: dict[str, Any]) -> None:
        """Write the last request atomically. Call it with the lock held.

        :raises ConfigError: when the state directory cannot be written.
        """
        atomic_write(self.dir, self.request_path, json.dumps(doc, indent=1).encode(), self.root)


def vm_owner(root: Path, sandbox: str, reached: Endpoint) -> Optional[str]:
    """Another sandbox of the state directory ``root`` whose saved request leads to the VM
    that ``reached`` (an endpoint as connecting reached it) leads to, or None
    (:func:`owner_among`, over every sandbox's saved request read from its file).

    Called for a sandbox's first request only (one without a saved request of its own),
    so an apply reads the other sandboxes' saved requests once in its sandbox's life.
    ``kata-mem serve`` answers the same question from the saved requests its node view
    keeps (:meth:`kata_mem.interfaces.node_view.NodeView.vm_owner`), by the same rule.
    """
    with node_lock(root, shared=True):  # no sandbox directory half made or half removed
        names = sandboxes(root).sandboxes
    return owner_among(
        sandbox, reached, ((n, saved_backend(SandboxState(root, n))) for n in names if n != sandbox)
    )


def saved_backend(state: SandboxState) -> Optional[Endpoint]:
    """The backend of the sandbox's saved request as ``status --all`` shows it and
    :func:`owner_among` weighs it: None when there is none, or it cannot be read or
    trusted (``reconcile`` reports it)."""
    try:
        return state.saved_endpoint()
    except KataMemError:
        return None


def owner_among(
    sandbox: str, reached: Endpoint, saved: Iterable[tuple[str, Optional[Endpoint]]]
) -> Optional[str]:
    """The first sandbox of ``saved`` (each sandbox's id and its saved request's backend,
    in name order), other than ``sandbox``, whose saved request leads to the VM ``reached``
    leads to (the same :func:`vm_key`), or None.

    A VM is sized from one sandbox's requests: a second sandbox id sending its own would
    resize the first one's VM from another workload, and neither journal would tell what
    the VM holds (two owners of one VM's memory). A saved request that cannot be read or
    trusted is passed over (None in ``saved``).
    """
    key = vm_key(reached)
    if key is None:
        return None
    for other, backend in saved:
        if other == sandbox or backend is None or vm_key(backend) != key:
            continue
        if not _other_vmm(backend, reached):
            return other
    return None


def _other_vmm(saved: Endpoint, reached: Endpoint) -> bool:
    """Whether a saved request whose socket file has the inode ``reached`` has was applied
    to another VMM than the one listening now, by the rule a saved request's VMM is proven
    by when connecting (:meth:`~kata_mem.core.endpoint.VmmIdentity.other_socket`,
    :meth:`~kata_mem.core.endpoint.VmmIdentity.other_peer`): once a VM's socket file is
    removed, a new one may get the same inode number, and a sandbox whose VM is gone must
    not be taken for the owner of the VM bound there since."""
    if saved.vmm is None or reached.vmm is None:
        return False
    now = reached.vmm
    return bool(
        saved.vmm.other_socket(now.device, now.inode, now.owner_uid)
        or saved.vmm.other_peer(now.peer_uid, now.peer_pid)
    )


def vm_key(endpoint: Endpoint) -> Optional[tuple[object, ...]]:
    """What two endpoints that lead to one VM have in common: for QMP the socket file (its
    filesystem device and inode, which a saved request keeps as ``backend.vmm``); for
    libvirt the URI and domain. None for a QMP endpoint without its VMM (saved by a
    kata-mem older than the pin): it is compared with none."""
    if endpoint.kind == "libvirt":
        return ("libvirt", endpoint.target, endpoint.domain)
    if endpoint.vmm is None:
        return None
    return ("qmp", endpoint.vmm.device, endpoint.vmm.inode)
