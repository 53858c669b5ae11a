"""The sandbox sizing the container runtime hands Kata in annotations: containerd's CRI
annotations (``io.kubernetes.cri.sandbox-*``), CRI-O's copies of the pod's resources and
overhead (``pod-linux-resources.crio.io``, ``pod-linux-overhead.crio.io``), and
kata-mem's own overhead annotation. Pure.

Kata's own per-pod annotations (``io.katacontainers.config.hypervisor.*``) are
:mod:`kata_mem.core.annotations`.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any, Optional

from kata_mem.core.errors import InputError
from kata_mem.core.fields import is_int, json_value, spelled_float
from kata_mem.core.model import Note, SandboxSizing
from kata_mem.core.units import INT64_MAX, INT64_MIN, UINT64_MAX

ANN_SANDBOX_MEMORY = "io.kubernetes.cri.sandbox-memory"
ANN_SANDBOX_CPU_QUOTA = "io.kubernetes.cri.sandbox-cpu-quota"
ANN_SANDBOX_CPU_PERIOD = "io.kubernetes.cri.sandbox-cpu-period"
ANN_SANDBOX_CPU_SHARES = "io.kubernetes.cri.sandbox-cpu-shares"
#: The pod's RuntimeClass overhead, as a Kubernetes quantity. The kubelet passes it in
#: ``LinuxPodSandboxConfig.overhead`` (kuberuntime_sandbox_linux.go
#: ``convertOverheadToLinuxResources``); CRI-O copies it into the sandbox's OCI spec
#: (:data:`ANN_CRIO_OVERHEAD`), containerd does not, so on containerd this is a pod
#: annotation it forwards when the runtime's ``pod_annotations`` lists it.
ANN_POD_OVERHEAD = "kata-mem.io/pod-overhead-memory"
#: CRI-O's copy of ``LinuxPodSandboxConfig.overhead`` (Go ``encoding/json`` of a
#: ``runtimeapi.LinuxContainerResources``, ``null`` when the kubelet gave none): CRI-O
#: v1.35 and later write the first key, earlier ones the second (cri-o
#: pkg/annotations/v2/annotations.go ``PodLinuxOverhead``, server/sandbox_run_linux.go
#: ``setupSandboxResources``); read back as CRI-O reads it, the first one first
#: (internal/lib/container_server.go, ``v2.GetAnnotationValue``).
ANN_CRIO_OVERHEAD = ("pod-linux-overhead.crio.io", "io.kubernetes.cri-o.PodLinuxOverhead")
#: CRI-O's copy of the CRI sandbox resources (``LinuxPodSandboxConfig.resources``, as Go
#: ``encoding/json`` writes a ``runtimeapi.LinuxContainerResources``): CRI-O v1.35 and
#: later write only the first key, earlier ones the second
#: (cri-o pkg/annotations/v2/annotations.go, server/sandbox_run_linux.go
#: ``setupSandboxResources``); read as CRI-O reads them back, the first one first
#: (``v2.GetAnnotationValue``). Kata reads neither yet (kata-containers#13634).
ANN_CRIO_RESOURCES = ("pod-linux-resources.crio.io", "io.kubernetes.cri-o.PodLinuxResources")
#: Any of these says the annotations are a sandbox's (a pod's) sizing.
SANDBOX_SIZING_KEYS = (ANN_SANDBOX_MEMORY, *ANN_CRIO_RESOURCES)


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
    notes: list[Note] = []

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
            notes.append(
                Note(
                    "cri_annotations",
                    f"{where}: annotation {key}: {raw[:40]!r} is not {kind}; "
                    "read as absent (0), as Kata does",
                )
            )
            return 0
        return value

    crio = next((k for k in ANN_CRIO_RESOURCES if k in annotations), None)
    if ANN_SANDBOX_MEMORY not in annotations and crio is not None:
        memory, quota, period, shares = _crio_resources(annotations[crio], crio, where, notes)
    else:
        memory = number(ANN_SANDBOX_MEMORY, signed=True)
        quota = number(ANN_SANDBOX_CPU_QUOTA, signed=True)
        period = number(ANN_SANDBOX_CPU_PERIOD, signed=False)
        shares = number(ANN_SANDBOX_CPU_SHARES, signed=False)
    memory = max(memory, 0)
    cpu = Fraction(0)
    if quota >= 0 and period > 0:
        cpu = Fraction(quota, period)
    elif quota < 0 and shares > 0:
        cpu = Fraction(math.ceil(Fraction(shares, 1024)))
    return SandboxSizing(min(memory, INT64_MAX), cpu, where, tuple(notes))


#: The fields of CRI-O's annotation that size a sandbox, as Go's encoding/json names
#: them from cri-api ``LinuxContainerResources`` (``omitempty``: a zero is absent).
_CRIO_FIELDS = ("memory_limit_in_bytes", "cpu_quota", "cpu_period", "cpu_shares")


def _crio_resources(raw: str, key: str, where: str, notes: list[Note]) -> tuple[int, int, int, int]:
    """Memory, quota, period and shares from CRI-O's sandbox-resources annotation (a
    JSON object; absent fields are 0). One that is not such an object, or a field that
    is not a 64-bit integer, is read as absent (0) with a warning, as a malformed
    containerd annotation is (kata-containers PR #13649, the Go runtime's reader under
    review, logs and sizes from 0 too)."""
    try:
        doc = json.loads(raw, parse_float=spelled_float)  # 1e400 shown as written
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        notes.append(
            Note(
                "cri_annotations",
                f"{where}: annotation {key}: {raw[:40]!r} is not a JSON object of CRI "
                "resources; read as absent (0), as Kata reads a malformed sizing annotation",
            )
        )
        return 0, 0, 0, 0
    values = []
    for name in _CRIO_FIELDS:
        value = doc.get(name, 0)
        if not (is_int(value) and INT64_MIN <= value <= INT64_MAX):
            notes.append(
                Note(
                    "cri_annotations",
                    f"{where}: annotation {key}: {name} {json_value(value)[:40]} is not a "
                    "64-bit integer; read as absent (0), as Kata reads a malformed sizing "
                    "annotation",
                )
            )
            value = 0
        values.append(int(value))
    memory, quota, period, shares = values
    return memory, quota, max(period, 0), max(shares, 0)


def overhead_annotation(annotations: dict[str, str], where: str) -> Optional[tuple[int, str]]:
    """The pod overhead in bytes and the annotation it came from; ``None`` when no
    annotation gives it.

    CRI-O's copy of the kubelet's overhead (:data:`ANN_CRIO_OVERHEAD`) comes first: it is
    the figure the kubelet sized the pod cgroup with. Its ``memory_limit_in_bytes`` absent
    or 0 (``omitempty``: a RuntimeClass without a memory overhead, or ``null``: none at
    all) gives no overhead, and :data:`ANN_POD_OVERHEAD` is read instead.

    :raises InputError: CRI-O's value that is not a JSON object with a non-negative
        64-bit ``memory_limit_in_bytes`` (CRI-O itself fails to restore such a sandbox:
        ``error unmarshalling``).
    :raises QuantityError: a :data:`ANN_POD_OVERHEAD` that is not a non-negative
        Kubernetes quantity.
    """
    crio = next((k for k in ANN_CRIO_OVERHEAD if k in annotations), None)
    if crio is not None:
        raw = annotations[crio]
        try:
            doc: Any = json.loads(raw, parse_float=spelled_float)
        except (ValueError, RecursionError):
            doc = ""
        memory: Any = doc.get("memory_limit_in_bytes", 0) if isinstance(doc, dict) else 0
        if doc is not None and not (
            isinstance(doc, dict) and is_int(memory) and 0 <= memory <= INT64_MAX
        ):
            raise InputError(
                f"{where}: annotation {crio} {raw[:80]!r}: expected CRI-O's copy of the "
                "kubelet's pod overhead, a JSON object of CRI LinuxContainerResources "
                "with memory_limit_in_bytes a non-negative 64-bit integer, or null"
            )
        if memory:
            return int(memory), crio
    raw = annotations.get(ANN_POD_OVERHEAD, "")
    if raw == "":
        return None
    from kata_mem.core.quantity import quantity_bytes

    value = quantity_bytes(raw, f"{where}: annotation {ANN_POD_OVERHEAD} {raw[:40]!r}")
    return value, ANN_POD_OVERHEAD


def sizing_annotations(sizing: SandboxSizing) -> dict[str, str]:
    """The CRI annotations that :func:`sandbox_sizing` reads back as ``sizing``."""
    return {
        ANN_SANDBOX_MEMORY: str(sizing.memory),
        ANN_SANDBOX_CPU_QUOTA: str(sizing.cpu.numerator),
        ANN_SANDBOX_CPU_PERIOD: str(sizing.cpu.denominator),
    }
