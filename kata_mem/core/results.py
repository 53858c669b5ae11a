"""What serving a request comes to, and what the status and reconcile commands report:
the typed results the interfaces render (each renders them once, as text or JSON).

A :class:`Response` has one type per mode of a request: :class:`Planned` (a plan,
nothing ran), :class:`Applied` (a resize or a dry run: the plan made from the observed
VM and its outcome) and :class:`Forgotten` (a delete). No field is optional because of
the mode, so no caller has to check what it was.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import GUEST_TIMEOUT_EXIT, BackendError
from kata_mem.core.model import Note, Outcome, Plan, Reason, SizingConfig, Status, Unseen
from kata_mem.core.values import Frozen


def outcome_exit_code(reason: Reason) -> int:
    """The exit code for an outcome's reason: 0, except for the hypervisor's failure
    (the code of :class:`~kata_mem.core.errors.BackendError`) and the guest's timeouts (8)."""
    return {
        "BackendError": BackendError.exit_code,
        "UnplugTimeout": GUEST_TIMEOUT_EXIT,
        "PlugTimeout": GUEST_TIMEOUT_EXIT,
    }.get(reason, 0)


class Planned(Frozen):
    """A plan-only request: what a freshly booted VM would get. Nothing ran."""

    sandbox: str
    config: SizingConfig
    plan: Plan
    exit_code = 0

    @property
    def notes(self) -> tuple[Note, ...]:
        return ()


class Applied(Frozen):
    """A resize (or a dry run): the plan made from the observed VM, what came of it,
    and the call's own notes (the plan carries its own)."""

    sandbox: str
    config: SizingConfig
    plan: Plan
    outcome: Outcome
    notes: tuple[Note, ...] = ()

    @property
    def exit_code(self) -> int:
        """0, or the code of the hypervisor's or the guest's failure (docs, "Exit codes")."""
        return outcome_exit_code(self.outcome.reason)


class Forgotten(Frozen):
    """A delete: the sandbox's state is gone, or the notes say what was kept and why."""

    sandbox: str
    config: SizingConfig
    notes: tuple[Note, ...] = ()
    exit_code = 0


#: What serving one request came to (``kata_mem.handle``).
Response = Union[Planned, Applied, Forgotten]


#: A managed sandbox's state in ``status --all``: a step under way (``running``), the last
#: outcome's status, or ``unknown`` (no outcome recorded yet).
SummaryState = Literal["running", "unknown", Status]


class SandboxSummary(Frozen):
    """One managed sandbox as its journal and saved request describe it (no VM is asked)."""

    sandbox: str
    backend: Optional[Endpoint]
    current: Optional[int]
    target: Optional[int]
    state: SummaryState
    #: The last outcome's reason, when the sandbox is not mid-step ("" for none).
    reason: Reason = ""


class NodeStatus(Frozen):
    """Every sandbox kata-mem manages on this node, and the node's totals (``status --all``)."""

    host: int
    reserved: int
    budget: Optional[int]
    committed: int
    sandboxes: tuple[SandboxSummary, ...]
    skipped: tuple[str, ...] = ()
    state_dir: str = ""
    #: False when the state directory does not exist (yet, or its path is mistyped).
    found: bool = True
    notes: tuple[Note, ...] = ()


#: What one reconcile visit did for a sandbox: ``retried`` its saved request,
#: ``waiting`` (a backoff, or another call holds it), ``cleaned`` (its VM is gone),
#: ``skipped`` (not kata-mem's, or nothing to re-run), ``failed``, ``idle`` (nothing due).
VisitAction = Literal["retried", "waiting", "cleaned", "skipped", "failed", "idle"]


class Visit(Frozen):
    """What one reconcile pass did for one sandbox: the outcome and notes of a
    retried request, the exit code of a failure."""

    sandbox: str
    action: VisitAction
    detail: str
    outcome: Optional[Outcome] = None
    notes: tuple[Note, ...] = ()
    exit_code: int = 0
    #: Why the retried resize could not see QEMU's host cgroup, when it could not.
    unseen: Optional[Unseen] = None
