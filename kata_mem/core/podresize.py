"""The runtime's answer to a pod resize (CRI ``UpdatePodSandboxResources``). Pure.

Since kubernetes PR #137555 the kubelet calls ``UpdatePodSandboxResources`` *before* it
writes the pod cgroup, takes an error as "resize rejected" (the resize stays in
progress and a later sync retries it), and sends the old resources again when the cgroup
write fails (pkg/kubelet/kuberuntime/kuberuntime_manager.go ``doPodResizeAction``;
kuberuntime_container.go ``updatePodSandboxResources``). Only ``Unimplemented``, or ``Unknown`` with "not
implemented" in the message (containerd 2.2), lets it go on regardless: kata-mem never
answers either.

:func:`settle` turns what the executor did into the answer to the kubelet: success only
when the VM is within what the new pod limit allows (guest + VMM overhead + margin,
:func:`kata_mem.core.plan.guards.level_room`) and QEMU's charge fits under it, so that the
kubelet's cgroup write that follows cannot OOM-kill QEMU. :func:`cri_answer` is the gRPC
status a shim returns for it (docs, "Kubernetes in-place resize").
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from kata_mem.core.frozen import frozen, replace
from kata_mem.core.model import CgroupLevel, Outcome, Status
from kata_mem.core.outcomes import backoff
from kata_mem.core.units import fmt_bytes

#: The gRPC codes kata-mem answers with (google.golang.org/grpc/codes).
CriCode = Literal["OK", "InvalidArgument", "FailedPrecondition", "Internal", "Unavailable"]
GRPC_CODES: dict[CriCode, int] = {
    "OK": 0,
    "InvalidArgument": 3,
    "FailedPrecondition": 9,
    "Internal": 13,
    "Unavailable": 14,
}
#: An outcome's status as the kubelet must read it: retry later (``Unavailable``), or
#: not until the resize changes (``FailedPrecondition``).
_BY_STATUS: dict[Status, CriCode] = {
    "Resized": "OK",
    "NoChange": "OK",
    "Deferred": "Unavailable",
    "InProgress": "Unavailable",
    "Infeasible": "FailedPrecondition",
}
#: A refused request by exit code (docs, "Exit codes"); anything else is Internal.
_BY_EXIT: dict[int, CriCode] = {
    3: "FailedPrecondition",
    4: "InvalidArgument",
    6: "Unavailable",
    7: "Unavailable",
    8: "Unavailable",
    9: "FailedPrecondition",
}


@frozen
class CriAnswer:
    """The gRPC status a shim returns for ``UpdatePodSandboxResources``, verbatim."""

    code: CriCode
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "grpc_code": GRPC_CODES[self.code], "message": self.message}


def cri_answer(outcome: Outcome) -> CriAnswer:
    """The answer for a resize that ran (:func:`settle` made the outcome)."""
    reason = f" {outcome.reason}" if outcome.reason else ""
    return CriAnswer(
        _BY_STATUS[outcome.status], f"kata-mem: {outcome.status}{reason}: {outcome.message}"
    )


def cri_refused(exit_code: int, message: str) -> CriAnswer:
    """The answer for a request kata-mem refused or could not carry out (exit code != 0)."""
    return CriAnswer(_BY_EXIT.get(exit_code, "Internal"), f"kata-mem: {message}")


def cri_planned() -> CriAnswer:
    """A request that does not apply (``apply: false``) changed nothing: the kubelet must
    not lower the pod cgroup on its word."""
    return CriAnswer(
        "FailedPrecondition",
        "kata-mem: the request does not apply (apply: false): the VM was not resized",
    )


def settle(
    outcome: Outcome,
    *,
    before: int,
    pod: CgroupLevel,
    allowed: int,
    base: int,
    charge: Optional[int],
    margin: int,
) -> Outcome:
    """What a resize for the new pod limit ``pod`` came to.

    ``before`` is the guest memory before the call, ``allowed`` the largest VM the new
    limit allows, ``base`` the boot memory, ``charge`` what the pod's cgroup level is
    charged now (``None``: unknown, not checked) and ``margin`` the host cgroup margin.
    A VM at its target but still above ``allowed`` is Infeasible (it cannot go lower);
    a VM within it whose QEMU is still charged more than the limit allows is Deferred
    (``ChargeAboveLimit``); any other outcome is kept. Every message says where the VM
    is and what the new limit allows.
    """
    limit = pod.limit
    observed = outcome.observed
    allows = (
        f"the new pod limit {fmt_bytes(limit)} ({pod.path}) allows a VM of "
        f"{fmt_bytes(allowed)} with the VMM overhead and margin"
    )
    if observed == before:
        where = f"the VM is unchanged at {fmt_bytes(observed)}"
    else:
        steps = len(outcome.steps)
        where = (
            f"the VM went from {fmt_bytes(before)} to {fmt_bytes(observed)} in {steps} "
            f"verified step{'s' if steps != 1 else ''}"
        )
    ok = outcome.status in ("Resized", "NoChange")
    if ok and observed > allowed:
        if allowed < base:
            return replace(
                outcome,
                status="Infeasible",
                reason="BelowBaseMemory",
                message=f"{allows}, below its boot memory {fmt_bytes(base)}: {where}; the pod "
                "cgroup must not be lowered to it",
                retry_after_s=None,
            )
        return replace(
            outcome,
            status="Infeasible",
            reason="BackendCannotShrink",
            message=f"{allows}, and the VM cannot be taken lower ({outcome.message}): {where}; "
            "the pod cgroup must not be lowered to it",
            retry_after_s=None,
        )
    if ok and charge is not None and charge + margin > limit:
        return replace(
            outcome,
            status="Deferred",
            reason="ChargeAboveLimit",
            message=f"{where}, within what {allows.removeprefix('the ')}, but QEMU's cgroup is "
            f"charged {fmt_bytes(charge)}, which with the margin {fmt_bytes(margin)} is above "
            "the new limit: lowering the pod cgroup now could OOM-kill QEMU",
            retry_after_s=backoff(1),
        )
    if ok:
        charged = "" if charge is None else f", its cgroup is charged {fmt_bytes(charge)}"
        return replace(
            outcome,
            message=f"{outcome.message}; {where}{charged}: {allows}, so the pod cgroup may be set",
        )
    # Deferred and InProgress are Unavailable (retry); Infeasible is FailedPrecondition:
    # the same resize does no better on a retry, so none is promised.
    then = (
        "the pod cgroup must not be set to it; retrying this resize will not change that"
        if outcome.status == "Infeasible"
        else "the pod cgroup is to wait for a retry"
    )
    return replace(outcome, message=f"{outcome.message}; {where}: {allows}; {then}")
