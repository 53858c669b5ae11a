"""Turn workload descriptions into :class:`~kata_mem.model.Container` values.

Sources: a Kubernetes Pod manifest (YAML or JSON), OCI ``config.json`` files
(with the CRI sandbox-sizing annotations), and command-line quantities. Each
reader validates at once and raises :class:`~kata_mem.errors.InputError` naming
the file, the field and what was expected.
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional

from kata_mem.errors import InputError, QuantityError
from kata_mem.files import MANIFEST_CAP, read_capped_text
from kata_mem.model import Container, Role, SandboxRequest, SandboxSizing
from kata_mem.quantity import parse_quantity, quantity_bytes
from kata_mem.units import INT64_MAX, INT64_MIN, UINT64_MAX

ANN_SANDBOX_MEMORY = "io.kubernetes.cri.sandbox-memory"
ANN_SANDBOX_CPU_QUOTA = "io.kubernetes.cri.sandbox-cpu-quota"
ANN_SANDBOX_CPU_PERIOD = "io.kubernetes.cri.sandbox-cpu-period"
ANN_SANDBOX_CPU_SHARES = "io.kubernetes.cri.sandbox-cpu-shares"
ANN_CONTAINER_TYPE = ("io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType")
ANN_CONTAINER_NAME = "io.kubernetes.cri.container-name"


def _read_text(path: Path, what: str) -> str:
    return read_capped_text(path, cap=MANIFEST_CAP, what=what, error=InputError)


# --- Pod manifests -----------------------------------------------------------------


def read_pod(path: Path) -> tuple[Container, ...]:
    """The containers of the one Pod in a YAML or JSON manifest, read as Kubernetes reads
    it (:mod:`kata_mem.manifest`).

    :raises InputError: unreadable file, invalid YAML/JSON, no Pod, no containers,
        or a bad resource value (named by its field path).
    """
    from kata_mem.manifest import load_documents

    docs = load_documents(_read_text(path, "Pod manifest"), str(path))
    pods = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Pod"]
    if len(pods) != 1:
        found = f"{len(pods)} Pods" if pods else "no document with kind: Pod"
        raise InputError(f"{path}: expected one Pod manifest (kind: Pod), found {found}")
    return pod_containers(pods[0], str(path))


def pod_containers(pod: dict[str, Any], where: str) -> tuple[Container, ...]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{where}: spec: expected a mapping with containers")
    apps = spec.get("containers")
    if not isinstance(apps, list) or not apps:
        raise InputError(f"{where}: spec.containers: expected a non-empty list of containers")
    inits = spec.get("initContainers", [])
    if inits is None:
        inits = []
    if not isinstance(inits, list):
        raise InputError(f"{where}: spec.initContainers: expected a list")
    out: list[Container] = []
    for field, items in (("initContainers", inits), ("containers", apps)):
        for i, item in enumerate(items):
            at = f"spec.{field}[{i}]"
            if not isinstance(item, dict):
                raise InputError(f"{where}: {at}: expected a container mapping")
            role: Role = "app"
            if field == "initContainers":
                role = "sidecar" if item.get("restartPolicy") == "Always" else "init"
            out.append(_pod_container(item, role, where, at))
    return tuple(out)


def _pod_container(item: dict[str, Any], role: Role, where: str, at: str) -> Container:
    name = item.get("name")
    name = name if isinstance(name, str) and name else at
    resources = item.get("resources") or {}
    if not isinstance(resources, dict):
        raise InputError(f"{where}: {at}.resources: expected a mapping")
    limits = resources.get("limits") or {}
    if not isinstance(limits, dict):
        raise InputError(f"{where}: {at}.resources.limits: expected a mapping")
    memory = 0
    hugepages = 0
    cpu = Fraction(0)
    for key, value in limits.items():
        field = f"{where}: {at}.resources.limits.{key}"
        if key == "memory":
            memory = _yaml_quantity_bytes(value, field)
        elif isinstance(key, str) and key.startswith("hugepages-"):
            hugepages += _yaml_quantity_bytes(value, field)
        elif key == "cpu":
            cpu = _yaml_quantity(value, field)
            if cpu < 0:
                raise InputError(
                    f"{field}: {_shown(value)} is negative; expected CPUs of 0 or more"
                )
    return Container(name, memory, hugepages, cpu, role, "running", f"{where}: {at}")


def _yaml_quantity(value: Any, field: str) -> Fraction:
    from kata_mem.manifest import kubernetes_quantity

    return kubernetes_quantity(value, field)


def _yaml_quantity_bytes(value: Any, field: str) -> int:
    amount = _yaml_quantity(value, field)
    if amount < 0:
        raise InputError(f"{field}: {_shown(value)} is negative; expected a size of 0 or more")
    return min(math.ceil(amount), INT64_MAX)


def _shown(value: Any) -> str:
    """A manifest value as Kubernetes sees it, for messages."""
    from kata_mem.manifest import json_text

    return json_text(value)


# --- OCI runtime specs -----------------------------------------------------------


def _int_field(obj: dict[str, Any], key: str, where: str) -> Optional[int]:
    if key not in obj or obj[key] is None:
        return None
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def _dict_field(obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}.{key}: expected an object, got {type(value).__name__}")
    return value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_oci(path: Path) -> tuple[Optional[Container], Optional[SandboxSizing]]:
    """A container (or, for a sandbox spec, the pod sizing) from an OCI ``config.json``.

    ``linux.resources.memory.limit`` (bytes; -1 or absent = no limit),
    ``hugepageLimits[].limit``, CPU ``quota``/``period`` and the cpuset ``cpus``.
    A sandbox (pause) spec contributes its ``io.kubernetes.cri.sandbox-*``
    annotations instead.

    :raises InputError: invalid JSON or a field of the wrong type, named by path.
    """
    text = _read_text(path, "OCI spec")
    try:
        spec = json.loads(text, parse_constant=_not_json)
    except RecursionError as exc:
        raise InputError(
            f"{path}: nested too deeply to read (more than a few hundred levels of arrays and"
            " objects); an OCI spec is a few levels deep"
        ) from exc
    except ValueError as exc:  # JSONDecodeError, NaN, or an integer too long to convert
        raise InputError(f"{path}: invalid JSON: {exc}") from exc
    if not isinstance(spec, dict):
        raise InputError(f"{path}: expected an OCI runtime spec (a JSON object)")
    where = f"{path}: "
    annotations = _dict_field(spec, "annotations", where + "")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise InputError(f"{path}: annotations.{key}: expected a string, got {value!r}")
    if (
        any(annotations.get(k) == "sandbox" for k in ANN_CONTAINER_TYPE)
        or ANN_SANDBOX_MEMORY in annotations
    ):
        return None, sandbox_sizing(annotations, str(path))
    linux = _dict_field(spec, "linux", where + "")
    resources = _dict_field(linux, "resources", where + "linux")
    memory = _dict_field(resources, "memory", where + "linux.resources")
    limit = _int_field(memory, "limit", where + "linux.resources.memory") or 0
    hugepages = 0
    pages = resources.get("hugepageLimits") or []
    if not isinstance(pages, list):
        raise InputError(f"{path}: linux.resources.hugepageLimits: expected a list")
    for i, page in enumerate(pages):
        if not isinstance(page, dict):
            raise InputError(f"{path}: linux.resources.hugepageLimits[{i}]: expected an object")
        hugepages += max(
            _int_field(page, "limit", f"{where}linux.resources.hugepageLimits[{i}]") or 0, 0
        )
    cpu_obj = _dict_field(resources, "cpu", where + "linux.resources")
    quota = _int_field(cpu_obj, "quota", where + "linux.resources.cpu") or 0
    period = _int_field(cpu_obj, "period", where + "linux.resources.cpu") or 0
    cpu = Fraction(quota, period) if quota > 0 and period > 0 else Fraction(0)
    cpus = cpu_obj.get("cpus")
    if cpus is not None and not isinstance(cpus, str):
        raise InputError(f"{path}: linux.resources.cpu.cpus: expected a string, got {cpus!r}")
    cpuset = cpuset_size(cpus or "", f"{path}: linux.resources.cpu.cpus")
    name = annotations.get(ANN_CONTAINER_NAME) or path.parent.name or path.name
    return (
        Container(
            name, max(limit, 0), hugepages, cpu, "app", "running", str(path), cpuset_cpus=cpuset
        ),
        None,
    )


_CPU_SPAN = re.compile(r"([0-9]{1,10})(?:-([0-9]{1,10}))?", re.ASCII)


def cpuset_size(text: str, where: str) -> int:
    """The number of CPUs in a Linux CPU list such as ``"0-3,7"`` (an OCI
    ``linux.resources.cpu.cpus``); ``""`` is none.

    As Kata's ``cpuset.Parse`` (src/runtime/virtcontainers/pkg/cpuset) counts it: a
    set, so overlapping ranges count once. Where Kata silently counts a malformed
    list as no CPUs at all (``calculateSandboxCPUs`` then returns 0 for the whole
    sandbox), the container could not start under runc either: it is refused here.

    :raises InputError: a part that is not ``N`` or ``N-M`` with N <= M; ``where`` names the field.
    """
    if text == "":
        return 0
    spans: list[tuple[int, int]] = []
    for part in text.split(","):
        m = _CPU_SPAN.fullmatch(part)
        low = int(m[1]) if m else 0
        high = int(m[2]) if m and m[2] else low
        if m is None or high < low:
            raise InputError(
                f'{where}: {text[:80]!r}: expected a CPU list such as "0-3,7" '
                f"(CPU numbers and ascending ranges N-M, comma-separated); bad part {part[:40]!r}"
            )
        spans.append((low, high))
    count, end = 0, -1
    for low, high in sorted(spans):
        if high > end:
            count += high - max(low, end + 1) + 1
            end = high
    return count


def sandbox_sizing(annotations: dict[str, str], where: str) -> SandboxSizing:
    """Pod sizing from containerd's CRI annotations (Kata ``CalculateSandboxSizing``,
    src/runtime/pkg/oci/utils.go): memory bytes (negative -> 0); CPUs quota/period,
    or ceil(shares/1024) when the quota is negative (unconstrained).

    Values are parsed as Go's ``strconv.ParseInt`` (memory, quota) and
    ``ParseUint`` (period, shares) parse them, 64 bits. As in Kata, one that does
    not parse is read as 0 with a warning, so a malformed annotation never keeps
    the pod from starting; the warnings travel in the result into the plan. An
    empty value is absent.
    """
    warnings: list[str] = []

    def number(key: str, signed: bool) -> int:
        raw = annotations.get(key, "")
        if raw == "":
            return 0
        digits = raw[1:] if signed and raw[:1] in "+-" else raw
        value: Optional[int] = None
        significant = digits.lstrip("0") or "0"
        # The length bound keeps int() cheap and inside Python's digit limit.
        if digits.isascii() and digits.isdigit() and len(significant) <= 20:
            value = -int(significant) if raw[:1] == "-" else int(significant)
        low, high, kind = (
            (INT64_MIN, INT64_MAX, "a 64-bit integer")
            if signed
            else (0, UINT64_MAX, "an unsigned 64-bit integer")
        )
        if value is None or not low <= value <= high:
            warnings.append(
                f"{where}: annotation {key}: {raw[:40]!r} is not {kind}; "
                "read as absent (0), as Kata does"
            )
            return 0
        return value

    memory = max(number(ANN_SANDBOX_MEMORY, signed=True), 0)
    quota = number(ANN_SANDBOX_CPU_QUOTA, signed=True)
    period = number(ANN_SANDBOX_CPU_PERIOD, signed=False)
    shares = number(ANN_SANDBOX_CPU_SHARES, signed=False)
    cpu = Fraction(0)
    if quota >= 0 and period > 0:
        cpu = Fraction(quota, period)
    elif quota < 0 and shares > 0:
        cpu = Fraction(math.ceil(Fraction(shares, 1024)))
    return SandboxSizing(min(memory, INT64_MAX), cpu, where, tuple(warnings))


# --- Command line -----------------------------------------------------------------


def cli_containers(limits: tuple[str, ...], cpus: tuple[str, ...]) -> tuple[Container, ...]:
    """One container per ``--limit`` and per ``--cpu`` value.

    :raises QuantityError: for a value that is not a quantity or is negative.
    """
    out = [
        Container(f"--limit #{i + 1}", quantity_bytes(q, f"--limit {q!r}"), origin="--limit")
        for i, q in enumerate(limits)
    ]
    for i, q in enumerate(cpus):
        try:
            cpu = parse_quantity(q)
        except QuantityError as exc:
            raise QuantityError(f"--cpu {q!r}: {exc}") from exc
        if cpu < 0:
            raise QuantityError(f"--cpu {q!r}: negative; expected CPUs of 0 or more")
        out.append(Container(f"--cpu #{i + 1}", cpu=cpu, origin="--cpu"))
    return tuple(out)


def build_request(
    pod: Optional[Path], oci: tuple[Path, ...], limits: tuple[str, ...], cpus: tuple[str, ...]
) -> SandboxRequest:
    """Everything given on one command line, as one sandbox request.

    :raises InputError: from any of the readers.
    """
    containers: list[Container] = []
    sizing: Optional[SandboxSizing] = None
    if pod is not None:
        containers += read_pod(pod)
    for spec in oci:
        container, spec_sizing = read_oci(spec)
        if container is not None:
            containers.append(container)
        if spec_sizing is not None:
            if sizing is not None:
                raise InputError(
                    f"{spec}: a second sandbox spec; expected at most one (first: {sizing.origin})"
                )
            sizing = spec_sizing
    containers += cli_containers(limits, cpus)
    return SandboxRequest(tuple(containers), sizing)
