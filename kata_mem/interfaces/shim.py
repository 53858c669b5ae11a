"""``kata-mem shim``: one JSON request on stdin, one JSON response on stdout.

Read, parse once (:meth:`~kata_mem.core.request.SandboxRequest.from_json`), answer
(:func:`~kata_mem.interfaces.protocol.answer`), render once. A runtime shim calls this on
every container event, so it is kept fast: it is dispatched before click is imported,
reads no YAML, and loads a backend only when the request names one. The request and
response are documented in docs/ and shipped as JSON Schemas in
``kata_mem/schemas/`` (``kata-mem shim --print-schema``); requests are checked by hand (no
validator import on the hot path) with errors that name the field.
"""

from __future__ import annotations

import json
from typing import IO

from kata_mem.core.request import MAX_REQUEST_BYTES, SandboxRequest
from kata_mem.interfaces.pipes import ResultLost, lost
from kata_mem.interfaces.protocol import answer, parse


def run_shim(stdin: IO[bytes], stdout: IO[str], env: dict[str, str]) -> int:
    """Read one request, write one response; return the exit code (that of
    :func:`~kata_mem.interfaces.pipes.lost` when stdout does not take the response)."""
    parsed = parse(stdin.read(MAX_REQUEST_BYTES + 1))
    done = answer(parsed, env) if isinstance(parsed, SandboxRequest) else parsed
    try:
        stdout.write(json.dumps(done.document()) + "\n")
        stdout.flush()
    except ResultLost as exc:
        return lost(exc)
    return done.exit_code
