"""``kata-mem shim``: one JSON request on stdin, one JSON response on stdout.

A runtime shim calls this on every container event, so it is kept fast: it is
dispatched before click is imported, reads no YAML, and loads a backend only
when the request names one. The request and response are documented in the
README and shipped as JSON Schemas in ``kata_mem/schemas/`` (``kata-mem shim
--print-schema``); they are checked here by hand (no validator import on the hot
path) with errors that name the field.
"""

from __future__ import annotations

import json
import os
import re
from fractions import Fraction
from typing import IO, TYPE_CHECKING, Any, Optional, Union

from kata_mem.errors import ConfigError, InputError, KataMemError, outcome_exit_code
from kata_mem.logs import describe, emit_error

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
    "cpuset",
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


#: Where a lone surrogate can come from: an escape ``\uD800``-``\uDFFF``, or its UTF-8
#: form, which ``json.loads`` decodes with ``surrogatepass``. A cheap filter: a match
#: only means the decoded document is checked.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _field(where: str, key: Union[str, int]) -> str:
    """The path of ``key`` inside ``where``, as errors name fields: ``containers[0].id``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    if key.isidentifier():
        return f"{where}.{key}" if where else key
    return f"{where}[{json.dumps(key)}]"


def _decode(raw: bytes) -> Any:
    """``json.loads``, refusing what JSON can carry but a request must not: a key given
    twice in one object (decoders disagree on which one counts, so an ``event`` given
    twice could mean ``update`` to the shim and ``delete`` to kata-mem), and text that
    is not UTF-8 (lone surrogates such as ``"\\udcff"``), which no path or id can be.

    :raises InputError: naming the key or value and its path.
    """
    duplicates: dict[int, str] = {}

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    duplicates[id(obj)] = key
                    break
                seen.add(key)
        return obj

    try:
        doc = json.loads(raw, object_pairs_hook=pairs_hook)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"request is not JSON: {exc}") from None
    if not duplicates and not _MAYBE_SURROGATE.search(raw):
        return doc  # the usual case: nothing to find, no walk
    # Depth-first in document order, without recursion (json.loads has already
    # bounded the depth, but the walk may start deeper in the stack than it did).
    todo: list[tuple[str, Any]] = [("", doc)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError:
                raise InputError(
                    f"request {where or 'document'}: {json.dumps(value)[:80]} is not valid "
                    "Unicode (a lone surrogate); expected UTF-8 text"
                ) from None
        elif isinstance(value, dict):
            if id(value) in duplicates:
                key = duplicates[id(value)]
                raise InputError(
                    f"request {_field(where, key)}: the key {json.dumps(key)} is given more than "
                    "once in one object; expected each key once"
                )
            children: list[tuple[str, Any]] = []
            for key, item in value.items():
                children += [(f"{where or 'document'} key", key), (_field(where, key), item)]
            todo.extend(reversed(children))
        elif isinstance(value, list):
            todo.extend(reversed([(_field(where, i), v) for i, v in enumerate(value)]))
    return doc


def parse_request(raw: bytes) -> dict[str, Any]:
    """Decode and validate a request; return it with typed values.

    :raises InputError: too large, not JSON, a key given twice, text that is not
        UTF-8, an unknown schema version, a missing or wrongly typed field (named),
        or an unknown field.
    """
    from kata_mem.backends import Endpoint
    from kata_mem.model import Container, SandboxRequest, check_sandbox_id

    if len(raw) > MAX_REQUEST_BYTES:
        raise InputError(f"request larger than {MAX_REQUEST_BYTES} bytes")
    doc = _decode(raw)
    if not isinstance(doc, dict):
        raise _fail("", "a JSON object", doc)
    if doc.get("schema") != REQUEST_SCHEMA:
        raise InputError(
            f"request schema: expected {REQUEST_SCHEMA!r}, got {json.dumps(doc.get('schema'))[:80]}"
        )
    _only(doc, _TOP, "")
    try:
        sandbox = check_sandbox_id(_str(doc, "sandbox_id", "") or "")
    except InputError as exc:
        raise InputError(f"request sandbox_id: {exc.message}") from None
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
        cpuset, cpus = item.get("cpuset"), 0
        if cpuset is not None:
            if not isinstance(cpuset, str):
                raise _fail(f"{where}.cpuset", 'null or a CPU list such as "0-3,7"', cpuset)
            from kata_mem.sources import cpuset_size

            cpus = cpuset_size(cpuset, f"request {where}.cpuset")
        containers.append(
            Container(name, max(limit, 0), hugepages, cpu, role, state, f"request {where}", cpus)
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
        _only(host, {"memory_bytes", "cpus", "arch", "hugepages"}, "host")
        from kata_mem.host import check_hugepages, normalize_arch

        arch = _str(host, "arch", "host", optional=True)
        pages = host.get("hugepages")
        pool = None
        if pages is not None:
            if not isinstance(pages, dict):
                raise _fail("host.hugepages", "null or an object", pages)
            _only(pages, {"count", "size_bytes"}, "host.hugepages")
            pool = check_hugepages(
                _int(pages, "count", "host.hugepages", minimum=0, optional=False) or 0,
                _int(pages, "size_bytes", "host.hugepages", minimum=1, optional=False) or 0,
                "request host.hugepages",
            )
        host = {
            "memory": _int(host, "memory_bytes", "host", minimum=1 << 20),
            "cpus": _int(host, "cpus", "host", minimum=1),
            "arch": None if arch is None else normalize_arch(arch, "request host.arch"),
            "hugepages": pool,
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
    from kata_mem.config import DEFAULT_PATHS, find_config, load_config
    from kata_mem.host import probe_host
    from kata_mem.planner import assumed_vm, plan

    req = parse_request(raw)
    try:
        found = find_config(req["config"], env)[0]
    except ConfigError:
        if req["config"] is not None or env.get("KATA_CONF_FILE"):
            raise
        # find_config's own message names the CLI's --config; a shim sets a field.
        raise ConfigError(
            "request config is null and there is no Kata configuration where Kata looks ("
            + " or ".join(DEFAULT_PATHS)
            + "): set request config to the configuration file (or KATA_CONF_FILE)"
        ) from None
    cfg = load_config(found)
    overrides = req["host"] or {}
    host = probe_host(
        memory=overrides.get("memory"),
        cpus=overrides.get("cpus"),
        arch=overrides.get("arch"),
        hugepages=overrides.get("hugepages"),
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
            # Only the size of a cpuset counts, so any set of that size reproduces it.
            **({"cpuset": f"0-{c.cpuset_cpus - 1}"} if c.cpuset_cpus > 0 else {}),
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
        if "hugepages" in overridden:
            doc["host"]["hugepages"] = {
                "count": host.hugepages_total,
                "size_bytes": host.hugepage_size,
            }
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


def _error_response(exc: KataMemError) -> dict[str, Any]:
    return {
        "schema": RESPONSE_SCHEMA,
        "error": {"kind": exc.kind, "message": exc.message, "exit_code": exc.exit_code},
        "plan": None,
        "outcome": None,
        "warnings": [],
    }


def _error_line(exc: KataMemError) -> None:
    # In the format the command line chose (kata-mem --log-format json shim).
    emit_error(exc, logger="kata_mem.shim", prefix="kata-mem shim")


def main(stdin: IO[bytes], stdout: IO[str], env: dict[str, str]) -> int:
    """Read one request, write one response; return the exit code.

    Every failure, a bug included, is answered with an error document: a shim
    reads stdout as JSON, never a traceback (``KATA_MEM_DEBUG=1`` re-raises bugs).
    """
    try:
        raw = stdin.read(MAX_REQUEST_BYTES + 1)
        response = handle(raw, env)
        code = outcome_exit_code((response.get("outcome") or {}).get("reason", ""))
    except KataMemError as exc:
        response = _error_response(exc)
        code = exc.exit_code
        _error_line(exc)
    except Exception as exc:  # a bug: still one JSON response and one stderr line
        if env.get("KATA_MEM_DEBUG"):
            raise
        bug = KataMemError(
            f"internal error: {describe(exc)} (a bug in kata-mem; set KATA_MEM_DEBUG=1 for the "
            "traceback)"
        )
        response = _error_response(bug)
        code = bug.exit_code
        _error_line(bug)
    stdout.write(json.dumps(response) + "\n")
    stdout.flush()
    return code
