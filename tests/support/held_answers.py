"""``kata-mem`` whose service holds the answer of a chosen sandbox until told.

``python -m tests.support.held_answers GATE ARGS...`` runs ``kata-mem ARGS`` with one
change: answering a request for sandbox ``held`` first creates ``GATE/started``, then
waits until ``GATE/release`` exists before the answer is made. A test can so tell, without
timing, whether the service answers others while one answer is being made.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path

from kata_mem.core.request import CallOptions, SandboxRequest
from kata_mem.interfaces import protocol, service

#: The sandbox whose answer is held.
HELD = "held"

#: How long an answer is held at most: a test that never releases it still ends.
HOLD_S = 60.0


def holding(gate: Path) -> None:
    """Hold the answers of sandbox :data:`HELD` at ``gate`` (in this process)."""
    real = protocol.answer

    def answer(
        request: SandboxRequest, env: Mapping[str, str], options: CallOptions = protocol.NO_OPTIONS
    ) -> protocol.Answer:
        if request.sandbox == HELD:
            (gate / "started").touch()
            deadline = time.monotonic() + HOLD_S
            while not (gate / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return real(request, env, options)

    setattr(service, "answer", answer)  # noqa: B010 (not a name service exports)


if __name__ == "__main__":
    holding(Path(sys.argv[1]))
    sys.argv[1:2] = []
    from kata_mem.interfaces.main import run

    run()
