"""The shim protocol's answers: one typed request answered with the typed response, or
the error that refused it (:class:`Answer`), and its document (schema
``kata-mem/shim-response/v1``), rendered once; for an ``update-sandbox`` request it carries
the gRPC status a shim returns to the kubelet (``cri``, :mod:`kata_mem.core.podresize`). What ``kata-mem shim`` prints for the request
on its stdin and ``kata-mem serve`` sends for ``POST /v1/shim``: both parse their input
once into a :class:`~kata_mem.core.request.SandboxRequest` and answer it here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional, Union

from kata_mem.core.errors import BackendUnavailable, InputError, KataMemError
from kata_mem.core.frozen import frozen, replace
from kata_mem.core.podresize import cri_answer, cri_planned, cri_refused
from kata_mem.core.request import (
    RESPONSE_SCHEMA,
    CallOptions,
    SandboxRequest,
)
from kata_mem.core.results import Applied, Planned, Response
from kata_mem.edges.logs import describe, emit_error

#: What a process that adds nothing to its requests passes.
NO_OPTIONS = CallOptions()


@frozen
class Answer:
    """One request answered: its typed response, or the error that refused it (exactly
    one of the two)."""

    response: Optional[Response] = None
    error: Optional[KataMemError] = None
    #: The request answers a CRI call (:func:`answers_cri`): the document carries the gRPC
    #: status to return for it (``cri``).
    cri: bool = False

    @property
    def exit_code(self) -> int:
        """The shim's exit code (docs, "Exit codes")."""
        if self.error is not None:
            return self.error.exit_code
        assert self.response is not None  # one of the two, by construction
        return self.response.exit_code

    def document(self) -> dict[str, Any]:
        """The response document (schema ``kata-mem/shim-response/v1``)."""
        from kata_mem.interfaces import render

        if self.error is not None:
            doc = {
                **render.error_json(self.error, RESPONSE_SCHEMA),
                "plan": None,
                "outcome": None,
                "warnings": [],
            }
            if self.cri:
                doc["cri"] = cri_refused(self.error.exit_code, self.error.message).to_json()
            return doc
        r = self.response
        assert r is not None
        plan = r.plan if isinstance(r, (Planned, Applied)) else None
        outcome = r.outcome if isinstance(r, Applied) else None
        doc = {
            "schema": RESPONSE_SCHEMA,
            "sandbox_id": r.sandbox,
            "plan": None if plan is None else render.plan_json(plan, r.config),
            "outcome": None
            if outcome is None
            else render.outcome_json(outcome, r.sandbox, r.notes),
            "warnings": render.warnings_json((*(plan.notes if plan else ()), *r.notes)),
        }
        if self.cri:
            doc["cri"] = (cri_planned() if outcome is None else cri_answer(outcome)).to_json()
        return doc


def refused(exc: KataMemError) -> Answer:
    """A request refused before it was handled (it does not parse, it is too large), with
    its line on stderr."""
    _error_line(exc)
    return Answer(error=exc)


#: The events whose requests answer a CRI call, as the NRI plugin sends them: the pod's
#: resize (``UpdatePodSandboxResources``) and a container's (``UpdateContainerResources``).
CRI_EVENTS = ("update-sandbox", "update")


def answers_cri(event: object) -> bool:
    """Whether a request of ``event`` answers a CRI call, so that its answer carries the
    gRPC status to return for it."""
    return event in CRI_EVENTS


def parse(raw: bytes) -> Union[SandboxRequest, Answer]:
    """The request in ``raw``, or the answer that refuses it. A refused request of an event
    that answers a CRI call is answered with ``cri`` too (``InvalidArgument``): the caller
    must always have a gRPC status to return."""
    try:
        return SandboxRequest.from_json(raw)
    except KataMemError as exc:
        return refusing(raw, exc)


def refusing(raw: bytes, exc: KataMemError) -> Answer:
    """``exc`` refusing the request in ``raw``, read or not, with its line on stderr; with
    ``cri`` when the event it asks for answers a CRI call (the status of ``exc``'s exit code)."""
    return replace(refused(exc), cri=answers_cri(_asked_event(raw)))


def as_served(request: SandboxRequest, default_config: Optional[str]) -> SandboxRequest:
    """``request`` as ``kata-mem serve`` answers it: a null ``config`` is the service's
    ``--config`` when it has one (else where Kata looks, as for ``kata-mem shim``)."""
    if request.config is None and default_config is not None:
        return replace(request, config=default_config)
    return request


def _asked_event(raw: bytes) -> object:
    """The event a request that did not parse asked for: read leniently, since it was
    refused; text that is not a JSON object names none."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return doc.get("event") if isinstance(doc, dict) else None


def answer(
    request: SandboxRequest, env: Mapping[str, str], options: CallOptions = NO_OPTIONS
) -> Answer:
    """Handle ``request`` (:func:`kata_mem.orchestration.handle.handle`) and say what came
    of it. Every failure, a bug included, is answered with an error (and one line on
    stderr): a shim reads JSON, never a traceback (``KATA_MEM_DEBUG=1`` re-raises bugs).
    """
    from kata_mem.orchestration.handle import handle

    cri = answers_cri(request.event)
    try:
        return Answer(response=handle(request, env, options), cri=cri)
    except BackendUnavailable as exc:
        return replace(refused(_named_vmm(request, exc)), cri=cri)
    except KataMemError as exc:
        return replace(refused(exc), cri=cri)
    except Exception as exc:  # a bug: still one JSON response and one stderr line
        if env.get("KATA_MEM_DEBUG"):
            raise
        bug = refused(
            KataMemError(
                f"internal error: {describe(exc)} (a bug in kata-mem; set KATA_MEM_DEBUG=1 "
                "for the traceback)"
            )
        )
        return replace(bug, cri=cri)


def _named_vmm(request: SandboxRequest, exc: BackendUnavailable) -> KataMemError:
    """A ``backend.vmm`` the caller gave that the socket does not lead to is bad input,
    not a VM that is gone: kata-mem writes that field in the requests it saves, and a
    shim leaves it null (docs/guide/shim.md). Only a saved request's (``reconcile``) means
    that its VM is gone."""
    endpoint = request.endpoint
    if exc.other_vmm is None or endpoint is None or endpoint.vmm is None:
        return exc
    vmm = endpoint.vmm
    return InputError(
        f"request backend.vmm: names the VMM of socket inode {vmm.inode}, owner uid "
        f"{vmm.owner_uid}, listener uid {vmm.peer_uid}, pid {vmm.peer_pid}, but at "
        f"{endpoint.target} {exc.other_vmm}; expected null (kata-mem writes backend.vmm in "
        "the requests it saves) or the one GET /v1/node shows for this sandbox"
    )


def _error_line(exc: KataMemError) -> None:
    # In the format the command line chose (kata-mem --log-format json shim).
    emit_error(exc, logger="kata_mem.shim", prefix="kata-mem shim")
