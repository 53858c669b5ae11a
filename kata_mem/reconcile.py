"""``kata-mem reconcile``: one pass over every sandbox in the state directory.

For each sandbox it re-runs the last request (saved by ``apply`` and the shim):
that retries a deferred shrink whose time has come (backoff 30 s doubling to
5 min), settles DIMMs whose unplug was pending, and repairs what a crash left.
A sandbox whose VM is gone (its socket is missing or refuses connections, or
libvirt has no such domain) is forgotten.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from kata_mem.errors import BackendUnavailable, KataMemError
from kata_mem.journal import SandboxState, sandboxes


@dataclass(frozen=True)
class Visit:
    """What one reconcile pass did for one sandbox."""

    sandbox: str
    action: str  # retried | waiting | cleaned | skipped | failed
    detail: str
    outcome: Optional[dict[str, Any]] = None


def reconcile_all(
    state_dir: str, env: dict[str, str], clock: Callable[[], float] = time.time
) -> list[Visit]:
    """Visit every sandbox once; never raises for one sandbox's trouble."""
    from kata_mem.shim import handle

    visits = []
    for sandbox in sandboxes(state_dir):
        state = SandboxState(state_dir, sandbox)
        if not state.request_path.is_file():
            if state.path.is_file():
                visits.append(
                    Visit(sandbox, "skipped", "no saved request (applied with --force only)")
                )
            else:
                state.remove()
                visits.append(
                    Visit(sandbox, "cleaned", "no journal and no request: nothing was ever applied")
                )
            continue
        record = state.load()
        deferred = record.deferred or {}
        retry_at = float(deferred.get("retry_at", 0))
        if retry_at > clock() and not record.pending_unplug:
            visits.append(
                Visit(
                    sandbox,
                    "waiting",
                    f"deferred ({deferred.get('reason')}), retry in {retry_at - clock():.0f} s",
                )
            )
            continue
        try:
            response = handle(Path(state.request_path).read_bytes(), env)
        except BackendUnavailable as exc:
            if exc.gone:
                state.remove()
                visits.append(
                    Visit(
                        sandbox, "cleaned", f"the VM is gone ({exc.message}); its state was removed"
                    )
                )
            else:
                visits.append(Visit(sandbox, "failed", exc.message))
            continue
        except KataMemError as exc:
            visits.append(Visit(sandbox, "failed", exc.message))
            continue
        outcome = response.get("outcome") or {}
        visits.append(
            Visit(
                sandbox,
                "retried",
                f"{outcome.get('status')} {outcome.get('reason') or ''}".strip(),
                outcome,
            )
        )
    return visits


def visits_json(visits: list[Visit]) -> dict[str, Any]:
    return {
        "schema": "kata-mem/reconcile/v1",
        "sandboxes": [
            {"sandbox": v.sandbox, "action": v.action, "detail": v.detail, "outcome": v.outcome}
            for v in visits
        ],
    }


def visits_text(visits: list[Visit]) -> str:
    if not visits:
        return "no sandboxes"
    return "\n".join(f"{v.sandbox}: {v.action}: {v.detail}" for v in visits)


__all__ = ["Visit", "reconcile_all", "visits_json", "visits_text"]
