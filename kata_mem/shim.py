"""``kata-mem shim``: one JSON request on stdin, one JSON response on stdout.

A runtime shim calls this on every container event, so it is kept fast: it is
dispatched before click is imported, reads no YAML, and loads a backend only
when the request names one. The request and response are documented in the
README and shipped as JSON Schemas in ``schemas/``; they are checked here by hand
(no validator import on the hot path) with errors that name the field.
"""

from __future__ import annotations

import json
import os
import sys
from fractions import Fraction
from typing import IO, TYPE_CHECKING, Any, Optional

from kata_mem.errors import InputError, KataMemError, outcome_exit_code

if TYPE_CHECKING:
    from kata_mem.backends import Endpoint
    from kata_mem.model import HostFacts, SandboxRequest, SandboxSizing, SizingConfig

REQUEST_SCHEMA = "kata-mem/shim-request/v1"
RESPONSE_SCHEMA = "kata-mem/shim-response/v1"
MAX_REQUEST_BYTES = 1 << 20
EVENTS = ("create", "update", "delete", "reconcile")
STATES = ("running", "created", "stopped")
_TOP = {
    "schema",
    "sandbox_id",
    "event",
    "config",
    "containers",
    "backend",
    "apply",
    "allow_shrink",
    "host",
    "annotations",
}
_CONTAINER = {
    "id",
    "state",
    "role",
    "memory_limit_bytes",
    "hugepages_limit_bytes",
    "cpu_quota",
    "cpu_period",
}
ROLES = ("app", "init", "sidecar")
INT64_MAX = (1 << 63) - 1


def _fail(field: str, expected: str, value: Any) -> InputError:
    shown = json.dumps(value) if not isinstance(value, (dict, list)) else type(value).__name__
    at = f"request {field}" if field else "request"
    return InputError(f"{at}: expected {expected}, got {shown[:80]}")


def _int(
    obj: dict[str, Any],
    key: str,
    where: str,
    *,
    minimum: int = -INT64_MAX - 1,
    optional: bool = True,
) -> Optional[int]:
    value = obj.get(key)
    if value is None:
        if optional:
            return None
        raise _fail(f"{where}.{key}", "an integer", value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT64_MAX:
        raise _fail(
            f"{where}.{key}",
            f"an integer from {minimum}" if minimum > -INT64_MAX - 1 else "an integer",
            value,
        )
    return value


def _str(obj: dict[str, Any], key: str, where: str, optional: bool = False) -> Optional[str]:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise _fail(f"{where}.{key}", "a non-empty string", value)
    return value


def _bool(obj: dict[str, Any], key: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        raise _fail(key, "true or false", value)
    return value


def _only(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(obj) - allowed)
    if extra:
        at = f"request {where}" if where else "request"
        raise InputError(
            f"{at}: unknown field {extra[0]!r}; expected only {', '.join(sorted(allowed))}"
        )


def parse_request(raw: bytes) -> dict[str, Any]:
    """Decode and validate a request; return it with typed values.

    :raises InputError: too large, not JSON, an unknown schema version, a missing
        or wrongly typed field (named), or an unknown field.
    """
    from kata_mem.backends import Endpoint
    from kata_mem.model import Container, SandboxRequest, check_sandbox_id

    if len(raw) > MAX_REQUEST_BYTES:
        raise InputError(f"request larger than {MAX_REQUEST_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"request is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _fail("", "a JSON object", doc)
    if doc.get("schema") != REQUEST_SCHEMA:
        raise InputError(
            f"request schema: expected {REQUEST_SCHEMA!r}, got {json.dumps(doc.get('schema'))[:80]}"
        )
    _only(doc, _TOP, "")
    sandbox = check_sandbox_id(_str(doc, "sandbox_id", "") or "")
    event = doc.get("event")
    if event not in EVENTS:
        raise _fail("event", " | ".join(EVENTS), event)
    config = _str(doc, "config", "", optional=True)
    containers_raw = doc.get("containers", [])
    if not isinstance(containers_raw, list):
        raise _fail("containers", "a list", containers_raw)
    containers = []
    for i, item in enumerate(containers_raw):
        where = f"containers[{i}]"
        if not isinstance(item, dict):
            raise _fail(where, "an object", item)
        _only(item, _CONTAINER, where)
        state = item.get("state", "running")
        if state not in STATES:
            raise _fail(f"{where}.state", " | ".join(STATES), state)
        role = item.get("role", "app")
        if role not in ROLES:
            raise _fail(f"{where}.role", " | ".join(ROLES), role)
        limit = _int(item, "memory_limit_bytes", where) or 0
        hugepages = _int(item, "hugepages_limit_bytes", where, minimum=0) or 0
        quota = _int(item, "cpu_quota", where) or 0
        period = _int(item, "cpu_period", where, minimum=0) or 0
        cpu = Fraction(quota, period) if quota > 0 and period > 0 else Fraction(0)
        name = _str(item, "id", where)
        assert name is not None
        containers.append(
            Container(name, max(limit, 0), hugepages, cpu, role, state, f"request {where}")
        )
    backend = doc.get("backend")
    endpoint: Optional[Endpoint] = None
    if backend is not None:
        if not isinstance(backend, dict):
            raise _fail("backend", "null or an object", backend)
        kind = backend.get("type")
        if kind == "qmp":
            _only(backend, {"type", "socket"}, "backend")
            endpoint = Endpoint("qmp", _str(backend, "socket", "backend") or "")
        elif kind == "libvirt":
            _only(backend, {"type", "uri", "domain"}, "backend")
            endpoint = Endpoint(
                "libvirt",
                _str(backend, "uri", "backend") or "",
                _str(backend, "domain", "backend") or "",
            )
        else:
            raise _fail("backend.type", '"qmp" or "libvirt"', kind)
    apply = _bool(doc, "apply")
    if apply and endpoint is None and event != "delete":
        raise InputError("request apply: true needs a backend")
    host = doc.get("host")
    if host is not None:
        if not isinstance(host, dict):
            raise _fail("host", "null or an object", host)
        _only(host, {"memory_bytes", "cpus", "arch"}, "host")
        host = {
            "memory": _int(host, "memory_bytes", "host", minimum=1 << 20),
            "cpus": _int(host, "cpus", "host", minimum=1),
            "arch": _str(host, "arch", "host", optional=True),
        }
    annotations = doc.get("annotations")
    sizing = None
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
        ):
            raise _fail("annotations", "an object of strings", annotations)
        from kata_mem.sources import ANN_SANDBOX_MEMORY, sandbox_sizing

        if ANN_SANDBOX_MEMORY in annotations:
            sizing = sandbox_sizing(annotations, "request annotations")
    return {
        "sandbox": sandbox,
        "event": event,
        "config": config,
        "request": SandboxRequest(tuple(containers), sizing),
        "endpoint": endpoint,
        "apply": apply,
        "allow_shrink": _bool(doc, "allow_shrink"),
        "host": host,
    }


def handle(raw: bytes, env: dict[str, str]) -> dict[str, Any]:
    """Serve one request; return the response document.

    :raises KataMemError: for every documented failure (the caller turns it into
        an error response and the exit code).
    """
    from kata_mem import render
    from kata_mem.config import find_config, load_config
    from kata_mem.host import probe_host
    from kata_mem.planner import assumed_vm, plan

    req = parse_request(raw)
    cfg = load_config(find_config(req["config"], env)[0])
    overrides = req["host"] or {}
    host = probe_host(
        memory=overrides.get("memory"),
        cpus=overrides.get("cpus"),
        arch=overrides.get("arch"),
        cgroup_dir=cfg.settings.host_memory_cgroup,
    )
    if req["event"] == "delete":
        return _delete(req["sandbox"], cfg.settings.state_dir)
    response: dict[str, Any] = {
        "schema": RESPONSE_SCHEMA,
        "sandbox_id": req["sandbox"],
        "plan": None,
        "outcome": None,
        "warnings": [],
    }
    if not req["apply"]:
        result_plan = plan(cfg, host, req["request"], assumed_vm(cfg, host))
        response["plan"] = render.plan_json(result_plan, cfg)
        response["warnings"] = list(result_plan.warnings)
        return response
    from kata_mem.apply import apply_request

    result = apply_request(
        cfg,
        host,
        req["request"],
        endpoint=req["endpoint"],
        sandbox=req["sandbox"],
        allow_shrink=req["allow_shrink"],
    )
    response["plan"] = render.plan_json(result.plan, cfg)
    response["outcome"] = render.outcome_json(result.outcome, req["sandbox"], result.warnings)
    response["warnings"] = list(result.plan.warnings) + list(result.warnings)
    return response


def request_doc(
    sandbox: str,
    cfg: SizingConfig,
    request: SandboxRequest,
    endpoint: Optional[Endpoint],
    allow_shrink: bool,
    host: HostFacts,
) -> dict[str, Any]:
    """A shim request that reproduces an apply: what ``kata-mem reconcile`` re-runs."""
    containers = [
        {
            "id": c.name,
            "state": c.state,
            "role": c.role,
            "memory_limit_bytes": c.memory_limit,
            "hugepages_limit_bytes": c.hugepages_limit,
            "cpu_quota": c.cpu.numerator,
            "cpu_period": c.cpu.denominator,
        }
        for c in request.containers
    ]
    doc: dict[str, Any] = {
        "schema": REQUEST_SCHEMA,
        "sandbox_id": sandbox,
        "event": "reconcile",
        "config": os.path.abspath(cfg.path),  # reconcile runs from another directory
        "containers": containers,
        "backend": None,
        "apply": endpoint is not None,
        "allow_shrink": allow_shrink,
    }
    if endpoint is not None:
        doc["backend"] = (
            {"type": "qmp", "socket": endpoint.target}
            if endpoint.kind == "qmp"
            else {"type": "libvirt", "uri": endpoint.target, "domain": endpoint.domain}
        )
    overridden = {k for k, v in host.sources if v == "override"}
    if overridden:
        doc["host"] = {"memory_bytes": host.memory, "cpus": host.cpus, "arch": host.arch}
    if request.sizing is not None:
        doc["annotations"] = _sizing_annotations(request.sizing)
    return doc


def _sizing_annotations(sizing: SandboxSizing) -> dict[str, str]:
    from kata_mem.sources import ANN_SANDBOX_CPU_PERIOD, ANN_SANDBOX_CPU_QUOTA, ANN_SANDBOX_MEMORY

    return {
        ANN_SANDBOX_MEMORY: str(sizing.memory),
        ANN_SANDBOX_CPU_QUOTA: str(sizing.cpu.numerator),
        ANN_SANDBOX_CPU_PERIOD: str(sizing.cpu.denominator),
    }


def _delete(sandbox: str, state_dir: str) -> dict[str, Any]:
    from kata_mem.journal import LOCK_WAIT_S, SandboxState, state_dir_state

    state = SandboxState(state_dir, sandbox)
    # state_dir_state refuses (exit 3) a state dir that is not kata-mem's, and creates nothing.
    found = state.remove(LOCK_WAIT_S) if state_dir_state(state_dir) == "ours" else "absent"
    warnings = {
        "removed": [],
        "absent": [f"no state for sandbox {sandbox}"],
        "not-ours": [
            f"{state_dir}/{sandbox} was not created by kata-mem (no marker); it was left alone"
        ],
        "busy": [
            f"sandbox {sandbox}: another call held its lock for {LOCK_WAIT_S:g} s; its state was "
            "kept, and `kata-mem reconcile` removes it once the VM is gone"
        ],
    }[found] + state.warnings
    return {
        "schema": RESPONSE_SCHEMA,
        "sandbox_id": sandbox,
        "plan": None,
        "outcome": None,
        "warnings": warnings,
    }


def main(stdin: IO[bytes], stdout: IO[str], env: dict[str, str]) -> int:
    """Read one request, write one response; return the exit code. Never raises for bad input."""
    try:
        raw = stdin.read(MAX_REQUEST_BYTES + 1)
        response = handle(raw, env)
        code = outcome_exit_code((response.get("outcome") or {}).get("reason", ""))
    except KataMemError as exc:
        response = {
            "schema": RESPONSE_SCHEMA,
            "error": {"kind": exc.kind, "message": exc.message, "exit_code": exc.exit_code},
            "plan": None,
            "outcome": None,
            "warnings": [],
        }
        code = exc.exit_code
        print(f"kata-mem shim: error: {exc.message}", file=sys.stderr)
    stdout.write(json.dumps(response) + "\n")
    stdout.flush()
    return code
