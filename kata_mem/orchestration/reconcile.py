"""``kata-mem reconcile``: one pass over every sandbox in the state directory.

For each sandbox it re-runs the last request (saved by ``apply`` and the shim):
that retries a deferred shrink whose time has come (backoff 30 s doubling to
5 min), settles DIMMs whose unplug was pending, and repairs what a crash left.

Whether the VM is still there is decided first, from the saved request's backend
alone, by its adapter (:func:`kata_mem.orchestration.connect.vm_gone`: its QMP socket is
missing, refuses connections, or leads to another VMM than the one applied to; libvirt
has no such domain): a sandbox whose VM is gone is forgotten even when its configuration
file no longer exists. Only sandbox directories kata-mem created are visited;
anything else in the state directory is reported and left alone. One sandbox's
trouble is reported for that sandbox and the pass goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kata_mem.core.errors import BackendUnavailable, KataMemError
from kata_mem.core.record import Record
from kata_mem.core.request import CallOptions
from kata_mem.core.results import Applied, Visit
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.ledger import check_ledger, release
from kata_mem.edges.statedir import list_state_dir
from kata_mem.orchestration.connect import vm_gone
from kata_mem.orchestration.handle import handle


def _visit(
    state: SandboxState,
    env: dict[str, str],
    clock: Callable[[], float],
    state_dir: str,
    due_only: bool,
) -> Visit:
    sandbox = state.sandbox

    def forget(why: str) -> Visit:
        found = state.remove(0.0)
        if found == "busy":
            return Visit(sandbox, "waiting", f"{why}; another call holds its lock, left for now")
        if found == "removed":
            release(state_dir, sandbox)  # its journal is gone: the node's total falls now
        # clear() says what it kept, and why; else everything went.
        done = "; ".join(n.text for n in state.notes) or "its state was removed"
        return Visit(sandbox, "cleaned", f"{why}; {done}")

    if not state.owned():  # listed a moment ago; raises when another user could have written it
        return Visit(sandbox, "skipped", "not created by kata-mem")
    saved = state.saved_request()
    if saved is None:
        if state.path.is_file():
            return Visit(sandbox, "skipped", "no saved request (applied with --force only)")
        return forget("no journal and no request: nothing was ever applied")
    if saved.endpoint is not None:
        gone = vm_gone(saved.endpoint)
        if gone:
            return forget(f"the VM is gone ({gone})")
    record = state.load()
    if due_only and not record.due(clock()) and not _grow_unblocked(record):
        return Visit(sandbox, "idle", "nothing due")
    deferred = record.deferred
    if deferred is not None and deferred.retry_at > clock() and not record.pending_unplug:
        return Visit(
            sandbox,
            "waiting",
            f"deferred ({deferred.reason}), retry in {deferred.retry_at - clock():.0f} s",
        )
    try:
        response = handle(saved, env, CallOptions(state_dir=state_dir))
    except BackendUnavailable as exc:
        if exc.gone:
            return forget(f"the VM is gone ({exc.message})")
        raise
    if not isinstance(response, Applied):
        return Visit(sandbox, "retried", "planned only (the saved request does not apply)")
    outcome = response.outcome
    detail = f"{outcome.status} {outcome.reason}".strip()
    unseen = response.plan.memory.host_cgroup_unseen
    return Visit(sandbox, "retried", detail, outcome, response.notes, unseen=unseen)


def _grow_unblocked(record: Record) -> bool:
    """Whether the cgroup that held back a grow (:class:`~kata_mem.core.record.PendingGrow`)
    has another limit now: the kubelet raises the pod cgroup only after the runtime
    answered ``UpdatePodSandboxResources``, and nothing else tells kata-mem it did."""
    from kata_mem.edges.cgroups import CgroupUnreadable, cgroup_of_dir

    pending = record.pending_grow
    if pending is None:
        return False
    try:
        return cgroup_of_dir(pending.cgroup, "journal pending_grow.cgroup").limit != pending.limit
    except CgroupUnreadable:
        return False  # gone with its VM, which the presence check finds


def visit(
    state_dir: str,
    sandbox: str,
    env: dict[str, str],
    clock: Callable[[], float] = time.time,
    *,
    due_only: bool = False,
) -> Visit:
    """One sandbox's part of a pass; never raises for its trouble.

    ``due_only`` (the service's loop, every few seconds): a sandbox whose VM is there
    and whose journal asks for nothing (:meth:`~kata_mem.core.record.Record.due`) is left alone, action
    ``idle``, instead of having its last request re-run.
    """
    try:
        return _visit(SandboxState(state_dir, sandbox), env, clock, state_dir, due_only)
    except KataMemError as exc:
        return Visit(sandbox, "failed", exc.message, exit_code=exc.exit_code)
    except Exception as exc:  # a bug, or worse: still only this sandbox's
        return Visit(
            sandbox,
            "failed",
            f"internal error: {type(exc).__name__}: {exc}",
            exit_code=KataMemError.exit_code,
        )


def reconcile_all(
    state_dir: str, env: dict[str, str], clock: Callable[[], float] = time.time
) -> list[Visit]:
    """Visit every sandbox once; never raises for one sandbox's trouble.

    :raises ConfigError: the state directory is not a directory, is not kata-mem's, or
        could have been written by another user. A sandbox directory that another user
        could have written is that sandbox's failure (exit 3), and is not read.
    """
    listing = list_state_dir(state_dir)
    visits = [visit(state_dir, sandbox, env, clock) for sandbox in listing.sandboxes]
    visits += [
        Visit(name, "failed", why.message, exit_code=why.exit_code) for name, why in listing.refused
    ]
    for name in listing.foreign:
        shown = name.encode("utf-8", "backslashreplace").decode()
        visits.append(Visit(shown, "skipped", "not created by kata-mem"))
    mend_ledger(state_dir)
    return visits


def mend_ledger(state_dir: str) -> None:
    """Check the node's ledger against the journals and mend it (a crash may have left it
    counting too much); what differed is logged."""
    from kata_mem.edges.host import probe_host
    from kata_mem.edges.logs import get_logger

    for note in check_ledger(state_dir, probe_host().memory):
        get_logger(__name__).warning("%s", note.text)


def exit_code(visits: list[Visit]) -> int:
    """0 when no sandbox failed; else the exit code of the first failure."""
    return next((v.exit_code or 1 for v in visits if v.action == "failed"), 0)


__all__ = ["exit_code", "mend_ledger", "reconcile_all", "visit"]
