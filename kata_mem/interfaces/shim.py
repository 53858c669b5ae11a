"""``kata-mem shim``: one JSON request on stdin, one JSON response on stdout.

Read, parse once (:meth:`~kata_mem.core.request.SandboxRequest.from_json`), answer
(:func:`~kata_mem.interfaces.protocol.answer`), render once. A runtime shim calls this on
every container event, so it is kept fast: it is dispatched before click is imported,
reads no YAML, and loads a backend only when the request names one. The request and
response are documented in docs/ and shipped as JSON Schemas in
``kata_mem/schemas/`` (``kata-mem shim --print-schema``); requests are checked by hand (no
validator import on the hot path) with errors that name the field.

``kata-mem-shim`` (:mod:`~kata_mem.interfaces.shim_client`) answers here too when the node
service does not, for the service: in the state directory and with the configuration the
service keeps (:func:`answer_for_service`), or refusing, with the error it was given.
"""

from __future__ import annotations

import json
import os
from typing import IO, Optional

from kata_mem.core.errors import BackendUnavailable, ConfigError, KataMemError
from kata_mem.core.frozen import replace
from kata_mem.core.request import MAX_REQUEST_BYTES, CallOptions, SandboxRequest
from kata_mem.interfaces.pipes import ResultLost, lost
from kata_mem.interfaces.protocol import (
    Answer,
    answer,
    answers_cri,
    as_served,
    parse,
    refused,
    refusing,
)


def run_shim(
    stdin: IO[bytes],
    stdout: IO[str],
    env: dict[str, str],
    *,
    service: Optional[str] = None,
    refusal: Optional[KataMemError] = None,
) -> int:
    """Read one request, write one response; return the exit code (that of
    :func:`~kata_mem.interfaces.pipes.lost` when stdout does not take the response).
    ``service``: the socket of the ``kata-mem serve`` this process answers for
    (:func:`answer_for_service`); ``refusal``: the error that refuses the request."""
    raw = stdin.read(MAX_REQUEST_BYTES + 1)
    if refusal is not None:
        done = refusing(raw, refusal)
    else:
        parsed = parse(raw)
        if not isinstance(parsed, SandboxRequest):
            done = parsed
        elif service is None:
            done = answer(parsed, env)
        else:
            done = answer_for_service(parsed, env, service)
    try:
        stdout.write(json.dumps(done.document()) + "\n")
        stdout.flush()
    except ResultLost as exc:
        return lost(exc)
    return done.exit_code


def answer_for_service(request: SandboxRequest, env: dict[str, str], socket: str) -> Answer:
    """``request`` answered in this process as the ``kata-mem serve`` at ``socket`` would
    answer it: in the state directory it keeps and with its ``--config`` for a null
    ``config``, as it recorded them beside its socket
    (:func:`~kata_mem.edges.service_record.published_service`), so that a VM has one journal and
    one lock wherever its call is answered (issue 33, item 2). No record and nothing at the
    socket's path: there is no service, and the answer is ``kata-mem shim``'s. A record
    kata-mem must not trust, or none beside a socket (a serve older than the record, or one
    never started), says nothing of where the service keeps its state: only a plan that
    names its configuration, which uses no state, is answered; anything else is refused
    and nothing is applied."""
    from kata_mem.edges.service_record import published_service, service_record_path

    try:
        record = published_service(socket)
        if record is None and os.path.lexists(socket):
            raise BackendUnavailable(
                f"kata-mem serve at {socket} did not answer, and there is no "
                f"{service_record_path(socket)} to say which state directory it keeps (a "
                "serve older than this kata-mem-shim, or one never started): answered here, "
                "the request could make a second state of its VM, so nothing was applied. "
                "Start kata-mem serve and call again"
            )
    except (ConfigError, BackendUnavailable) as exc:
        if request.mode == "plan" and request.config is not None:
            return answer(request, env)  # no state, its own configuration: the service's answer
        return replace(refused(exc), cri=answers_cri(request.event))
    if record is None:
        return answer(request, env)
    return answer(as_served(request, record.config), env, CallOptions(state_dir=record.state_dir))
