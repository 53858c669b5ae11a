"""What ``kata-mem status`` and the node service's GET endpoints show: one sandbox's VM
as its hypervisor reports it (:func:`read_status`), found from its saved request when no
endpoint is given (:func:`saved_endpoint`), and every sandbox of the node from the state
directory, asking no VM (:func:`node_status`). The command line and the service call
these alike, each rendering what they return. Its two values (:class:`SandboxStatus`,
:class:`NoEndpoint`) are defined here rather than in :mod:`kata_mem.core.results`, which
every plan-only shim request loads: each dataclass defined costs start-up time, and a
shim's answer makes neither."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal, NamedTuple, Optional, Union

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError
from kata_mem.core.model import GuestUsage, Note, Settings, VmState
from kata_mem.core.record import Record
from kata_mem.core.request import HostOverrides
from kata_mem.core.results import NodeStatus, SandboxSummary
from kata_mem.core.values import Frozen

if TYPE_CHECKING:
    from kata_mem.core.model import HostFacts


class SandboxStatus(Frozen):
    """One sandbox's VM as its hypervisor reports it (``kata-mem status``, GET
    /v1/sandboxes/ID): the devices its journal proves kata-mem's marked, the guest's
    latest usage reading (``None``: the VM has no balloon), and its journal (``None``:
    kata-mem has none for it)."""

    vm: VmState
    usage: Optional[GuestUsage]
    record: Optional[Record]


#: Why kata-mem knows no VM for a sandbox: no state for it in the state directory, no
#: request applied to it yet, or its saved request names no backend.
Unknown = Literal["no-state", "no-request", "no-backend"]


class NoEndpoint(Frozen):
    """A sandbox whose VM kata-mem does not know (``status --sandbox ID``, GET
    /v1/sandboxes/ID): ``why``, in ``state_dir``."""

    sandbox: str
    why: Unknown
    state_dir: str

    def describe(self) -> str:
        return {
            "no-state": f"sandbox {self.sandbox}: unknown (kata-mem has no state for it in "
            f"{self.state_dir})",
            "no-request": f"sandbox {self.sandbox}: no resize recorded, so its VM is not known",
            "no-backend": f"sandbox {self.sandbox}: its saved request names no VM",
        }[self.why]


#: Every host fact probed (GET /v1/node; ``status --all`` without ``--host-memory``).
PROBED = HostOverrides()


def saved_endpoint(state_dir: str, sandbox: str) -> Union[Endpoint, NoEndpoint]:
    """The endpoint of the last request applied to the sandbox (marked ``saved``: it
    leads only to the VMM it was applied to), or why kata-mem knows none. The saved
    request is read as every saved request is (:meth:`SandboxState.saved_request`).
    Reads only.

    :raises ConfigError: the state directory is not kata-mem's, or it, the sandbox
        directory or the saved request could have been written by another user, or the
        request is for another sandbox (nothing is read from it, and no VM is asked).
    :raises InputError: the sandbox id, or the saved request, is not valid.
    """
    from kata_mem.edges.journal import SandboxState
    from kata_mem.edges.statedir import state_dir_state

    # As read_status: a state dir that is not kata-mem's, or that another user could have
    # written, is refused before anything in it is read.
    state_dir_state(state_dir)
    state = SandboxState(state_dir, sandbox)
    if not state.owned():
        return NoEndpoint(sandbox, "no-state", state_dir)
    saved = state.saved_request()
    if saved is None:
        return NoEndpoint(sandbox, "no-request", state_dir)
    return saved.endpoint or NoEndpoint(sandbox, "no-backend", state_dir)


def read_status(
    endpoint: Endpoint, sandbox: str, state_dir: str, env: Mapping[str, str]
) -> SandboxStatus:
    """What the hypervisor reports, with the devices the sandbox's journal proves are
    kata-mem's marked, the guest's latest usage reading as it is (with its age: nothing
    waits for, or asks for, a newer one), and the journal (if any). Changes nothing on
    the VM.

    :raises BackendUnavailable: the VM's hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's, or it or the sandbox's
        directory could have been written by another user (nothing is created).
    """
    from kata_mem.core.reports import owned_view
    from kata_mem.edges.journal import SandboxState
    from kata_mem.edges.statedir import state_dir_state
    from kata_mem.orchestration.connect import open_backend

    # Refuse, before connecting, a state dir that is not kata-mem's, and one or a sandbox
    # directory that another user could have written.
    state_dir_state(state_dir)
    state = SandboxState(state_dir, sandbox)
    owned = state.owned()
    backend = open_backend(endpoint, env).backend
    try:
        vm, usage = backend.observe(), backend.guest_usage()
    finally:
        backend.close()
    record = state.load(read_only=True) if owned and state.path.is_file() else None
    vm = owned_view(vm, record.owned if record is not None else ())
    return SandboxStatus(vm, usage, record)


def node_status(
    settings: Settings, state_dir: str, overrides: HostOverrides = PROBED
) -> NodeStatus:
    """What ``status --all`` and GET /v1/node show: read from the state directory, which
    is left as it is, against the host as probed (each fact from ``overrides`` when
    given: ``status --all --host-memory``). ``kata-mem serve`` keeps what this reads in
    memory (:mod:`kata_mem.interfaces.node_view`) and sums it with :func:`node_totals`.

    :raises ConfigError: the state directory is not kata-mem's, or it or a sandbox
        directory in it could have been written by another user (named, with its
        owner and mode: a listing that leaves it out would hide it).
    """
    from kata_mem.edges.statedir import list_state_dir
    from kata_mem.orchestration.handle import probe

    host = probe(overrides)
    listing = list_state_dir(state_dir)
    if listing.refused:
        raise ConfigError("; ".join(why.message for _name, why in listing.refused))
    rows = [summary(read_sandbox(state_dir, name), host.memory) for name in listing.sandboxes]
    return node_totals(settings, state_dir, host, rows, listing.foreign)


class SandboxFiles(NamedTuple):
    """What the node's view reads of one sandbox: its journal as it is (a fresh record,
    with a note, when it is missing or unreadable), the notes reading it made, and the
    backend of its saved request (None when it has none, or it cannot be read:
    ``reconcile`` reports that)."""

    sandbox: str
    record: Record
    notes: tuple[Note, ...]
    endpoint: Optional[Endpoint]


def read_sandbox(state_dir: str, name: str) -> SandboxFiles:
    """Read one sandbox of the node, kata-mem's (the caller listed it so), as
    :func:`node_status` shows it. Reads only.

    :raises ConfigError: another user could have written its journal.
    """
    from kata_mem.edges.journal import SandboxState, saved_backend

    state = SandboxState(state_dir, name)
    record = state.load(read_only=True)
    return SandboxFiles(name, record, tuple(state.notes), saved_backend(state))


class Row(NamedTuple):
    """One sandbox's part of the node's status against a host of ``limit`` bytes: its
    row, the bytes it commits, and the notes reading it made."""

    summary: SandboxSummary
    commitment: int
    notes: tuple[Note, ...]
    limit: int


def summary(files: SandboxFiles, limit: int) -> Row:
    """What :func:`node_totals` sums of one sandbox, against a host of ``limit`` bytes
    (sizes above it are dropped as damage, and said)."""
    name, unbounded, notes, endpoint = files
    record, dropped = unbounded.bounded(limit)
    if dropped:
        notes = (*notes, Note("journal", f"sandbox {name}: {dropped}"))
    last = record.last_outcome
    status = "running" if record.state == "running" else (last.status if last else "unknown")
    row = SandboxSummary(
        name,
        endpoint,
        record.observed,
        record.goal,
        status,
        last.reason if last and record.state != "running" else "",
    )
    return Row(row, record.commitment, notes, limit)


def node_totals(
    settings: Settings,
    state_dir: str,
    host: HostFacts,
    sandboxes: Iterable[Row],
    skipped: Iterable[str],
) -> NodeStatus:
    """The node's status from each sandbox's row (:func:`summary`, in order) and the
    entries that are not kata-mem's, against ``host``."""
    from kata_mem.core.plan.guards import reserved_problem
    from kata_mem.edges.logs import get_logger
    from kata_mem.orchestration.guards import node_budget

    rows: list[SandboxSummary] = []
    notes: list[Note] = []
    committed = 0
    for row, commitment, read_notes, _limit in sandboxes:
        rows.append(row)
        notes += read_notes
        committed += commitment
    budget = node_budget(settings, host)
    reserved = None if budget is None else reserved_problem(settings.node_reserved, host.memory)
    if reserved is not None:
        get_logger(__name__).warning("%s", reserved)
        notes.append(Note("node", reserved))
    return NodeStatus(
        host=host.memory,
        reserved=settings.node_reserved,
        budget=budget,
        committed=committed,
        sandboxes=tuple(rows),
        skipped=tuple(skipped),
        state_dir=state_dir,
        found=os.path.lexists(state_dir),
        notes=tuple(notes),
    )
