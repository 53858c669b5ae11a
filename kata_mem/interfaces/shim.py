"""``kata-mem shim``: one JSON request on stdin, one JSON response on stdout.

Read, parse (:meth:`~kata_mem.core.request.SandboxRequest.from_json`), serve
(:func:`~kata_mem.orchestration.apply.serve`), render. A runtime shim calls this on every
container event, so it is kept fast: it is dispatched before click is imported,
reads no YAML, and loads a backend only when the request names one. The request
and response are documented in the README and shipped as JSON Schemas in
``kata_mem/schemas/`` (``kata-mem shim --print-schema``); requests are checked by
hand (no validator import on the hot path) with errors that name the field.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Callable, Optional

from kata_mem.core.errors import KataMemError
from kata_mem.core.request import MAX_REQUEST_BYTES, RESPONSE_SCHEMA, SandboxRequest
from kata_mem.edges.logs import describe, emit_error

if TYPE_CHECKING:
    from kata_mem.orchestration.apply import Response


def response_json(response: Response) -> dict[str, Any]:
    """The response document (schema ``kata-mem/shim-response/v1``)."""
    from kata_mem.interfaces import render

    r = response
    plan_warnings = r.plan.warnings if r.plan is not None else ()
    return {
        "schema": RESPONSE_SCHEMA,
        "sandbox_id": r.sandbox,
        "plan": None if r.plan is None else render.plan_json(r.plan, r.config),
        "outcome": (
            None if r.outcome is None else render.outcome_json(r.outcome, r.sandbox, r.warnings)
        ),
        "warnings": [*plan_warnings, *r.warnings],
    }


def handle(raw: bytes, env: Mapping[str, str], *, state_dir: Optional[str] = None) -> Response:
    """Parse and serve one raw request (``state_dir``: ``kata-mem serve --state-dir``).

    :raises KataMemError: for every documented failure (the caller turns it into
        an error response and the exit code).
    """
    from kata_mem.orchestration.apply import serve

    return serve(SandboxRequest.from_json(raw), env, state_dir=state_dir)


def _error_response(exc: KataMemError) -> dict[str, Any]:
    from kata_mem.interfaces.render import error_json

    return {**error_json(exc, RESPONSE_SCHEMA), "plan": None, "outcome": None, "warnings": []}


def _error_line(exc: KataMemError) -> None:
    # In the format the command line chose (kata-mem --log-format json shim).
    emit_error(exc, logger="kata_mem.interfaces.shim", prefix="kata-mem shim")


def answer(
    read: Callable[[], bytes], env: Mapping[str, str], *, state_dir: Optional[str] = None
) -> tuple[dict[str, Any], int]:
    """One request, as ``read`` gives it, answered: the response document and the exit
    code. What ``kata-mem shim`` prints and ``kata-mem serve`` sends for ``POST /v1/shim``.

    Every failure, a bug included, is answered with an error document (and one line
    on stderr): a shim reads JSON, never a traceback (``KATA_MEM_DEBUG=1`` re-raises bugs).
    """
    try:
        served = handle(read(), env, state_dir=state_dir)
        return response_json(served), served.exit_code
    except KataMemError as exc:
        _error_line(exc)
        return _error_response(exc), exc.exit_code
    except Exception as exc:  # a bug: still one JSON response and one stderr line
        if env.get("KATA_MEM_DEBUG"):
            raise
        bug = KataMemError(
            f"internal error: {describe(exc)} (a bug in kata-mem; set KATA_MEM_DEBUG=1 for the "
            "traceback)"
        )
        _error_line(bug)
        return _error_response(bug), bug.exit_code


#: The exit code when stdout is closed before the result is written (``kata-mem shim <
#: req.json | true``): what a shell reports for a command that SIGPIPE ends, such as ``yes``
#: in ``yes | head -1`` (128 + 13). kata-mem ignores SIGPIPE, as Python does, so that a
#: closed pipe never kills it mid-step; it exits quietly with this code instead (the recipe
#: of https://docs.python.org/3/library/signal.html#note-on-sigpipe).
CLOSED_STDOUT = 141


def stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone: poll reports POLLERR
    (a pipe without readers) or POLLHUP (a socket shut down) for it. Tells a closed
    stdout from a broken pipe elsewhere (a socket), which is a bug to report."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream without a file
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked for
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def closed_stdout() -> int:
    """Exit quietly on a closed stdout: point it at /dev/null, so that the interpreter's
    last flush of what is still buffered finds nothing to fail on; return
    :data:`CLOSED_STDOUT`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_STDOUT


def run_shim(stdin: IO[bytes], stdout: IO[str], env: dict[str, str]) -> int:
    """Read one request, write one response (:func:`answer`); return the exit code
    (:data:`CLOSED_STDOUT` when nobody reads the response)."""
    response, code = answer(lambda: stdin.read(MAX_REQUEST_BYTES + 1), env)
    try:
        stdout.write(json.dumps(response) + "\n")
        stdout.flush()
    except BrokenPipeError:
        return closed_stdout()
    return code
