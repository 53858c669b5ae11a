"""kata-mem's answers to the Kata oracle cases (tests/fixtures/kata-cases), in the shape
of Kata's recorded ones, and the comparison of the two field by field.

A case is a configuration file with its ``config.d`` drop-ins (text, or one of the
packaged files under tests/fixtures/kata-configs), the host's CPUs, and for a sandbox the
annotations of its OCI spec. Kata's answer was recorded by running its Go runtime's own
functions on the case (the table's ``provenance`` says which and how); kata-mem's is
computed here through the same paths a user's input takes: the configuration loader
(:func:`kata_mem.edges.config.load_config`), the OCI spec reader
(:func:`kata_mem.edges.sources.read_oci`), the pod's annotations
(:func:`kata_mem.core.annotations.pod_config`) and the planner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from kata_mem.core.annotations import pod_config
from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.golang import parse_float32, parse_uint, round_float32
from kata_mem.core.model import HostFacts, SizingConfig, Workload
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import max_memory
from kata_mem.core.plan.vcpus import default_vcpus, vcpu_ceiling
from kata_mem.core.plan.workload import demand, static_size
from kata_mem.core.units import MiB
from kata_mem.edges.config import RUNTIME_RS_HYPERVISORS, load_config
from kata_mem.edges.sources import read_oci
from tests.support.paths import FIXTURES, KATA_CONFIGS

Answer = dict[str, Any]


#: The Go runtime's other packaged configurations, rendered at the commit the table was
#: recorded at (their README says how); the nine of tests/fixtures/kata-configs are the rest.
MORE_CONFIGS = FIXTURES / "kata-cases" / "configs"


def packaged(name: str) -> Path:
    """The packaged configuration a case's ``fixture`` names."""
    path = KATA_CONFIGS / name
    return path if path.exists() else MORE_CONFIGS / name


def materialize(case: dict[str, Any], where: Path) -> Path:
    """The case's configuration file, with its drop-ins and directories, under ``where``."""
    (where / "config.d").mkdir(parents=True, exist_ok=True)
    for d in case.get("dirs", []):
        (where / d).mkdir(parents=True, exist_ok=True)
    for f in case["files"]:
        text = packaged(f["fixture"]).read_text() if "fixture" in f else f["text"]
        (where / f["name"]).write_text(text)
    return where / "configuration.toml"


def host_of(case: dict[str, Any], memory_mib: int) -> HostFacts:
    """The host Kata's answer was recorded on: its CPUs as the case gives them, its memory
    as the table's provenance does; a hugepage pool larger than the memory (as many 2 MiB
    pages as it has MiB), so that only the rules Kata has bound ``default_maxmemory``
    (Kata checks no pool)."""
    return HostFacts(
        memory=memory_mib * MiB,
        cpus=case["host_cpus"],
        arch="amd64",
        hugepage_size=2 * MiB,
        hugepages_total=memory_mib,
    )


def _loaded(cfg: SizingConfig, host: HostFacts) -> Answer:
    """What Kata's ``LoadConfiguration`` answers, from kata-mem's configuration: the
    values as read, and the ones Kata makes of them on the host (``defaultMaxMemSz``,
    ``defaultVCPUs``, ``defaultMaxVCPUs``)."""
    return {
        "hypervisor": [cfg.hypervisor],
        "default_memory": cfg.default_memory // MiB,
        "memory_slots": cfg.memory_slots,
        "memory_offset": cfg.memory_offset // MiB,
        "default_maxmemory": max_memory(cfg, host)[0] // MiB,
        "default_vcpus": float(default_vcpus(cfg, host)),
        "default_maxvcpus": vcpu_ceiling(cfg, host)[0],
        "enable_virtio_mem": cfg.enable_virtio_mem,
        "enable_hugepages": cfg.enable_hugepages,
        "shared_fs": cfg.shared_fs,
        "enable_annotations": list(cfg.enable_annotations),
        "static": cfg.static_sandbox_resource_mgmt,
    }


def _sandbox(cfg: SizingConfig, host: HostFacts, workload: Workload) -> Answer:
    """What Kata's ``oci.SandboxConfig`` answers: the configuration with the pod's
    annotations, and with static sizing the workload added as Kata boots it."""
    answer = {
        "default_memory": cfg.default_memory // MiB,
        "default_vcpus": float(default_vcpus(cfg, host)),
        "default_maxvcpus": vcpu_ceiling(cfg, host)[0],
        "memory_slots": cfg.memory_slots,
        "memory_offset": cfg.memory_offset // MiB,
        "enable_virtio_mem": cfg.enable_virtio_mem,
        "enable_hugepages": cfg.enable_hugepages,
        "shared_fs": cfg.shared_fs,
    }
    if cfg.static_sandbox_resource_mgmt:
        need, _ = demand(cfg, workload)
        size = static_size(cfg, need)
        assert size is not None
        vcpus = plan(cfg, host, workload).vcpus
        answer.update(
            default_memory=size // MiB,
            default_vcpus=float(vcpus.requested),
            default_maxvcpus=vcpus.max,
        )
    return answer


def kata_mem_answer(case: dict[str, Any], where: Path, memory_mib: int) -> Answer:
    """kata-mem's answer to ``case``, in the shape of Kata's (``load``, and for a sandbox
    ``sizing`` and ``sandbox``); a refusal is ``{"error": message}``. The case's files are
    written under ``where`` and removed again (all but an empty ``config.d``), so that one
    directory serves every case."""
    try:
        return _answer(case, where, memory_mib)
    finally:
        for path in sorted(where.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path.is_dir() and not path.is_symlink():
                if path != where / "config.d":
                    path.rmdir()
            else:
                path.unlink()


def _answer(case: dict[str, Any], where: Path, memory_mib: int) -> Answer:
    host = host_of(case, memory_mib)
    try:
        cfg = load_config(materialize(case, where))
    except ConfigError as exc:
        return {"load": {"error": exc.message}}
    answer: Answer = {"load": _loaded(cfg, host)}
    if "annotations" not in case:
        return answer
    spec = where / "config.json"
    annotations = {"io.kubernetes.cri.container-type": "sandbox", **case["annotations"]}
    spec.write_text(json.dumps({"ociVersion": "1.0.2", "annotations": annotations}))
    _, sizing, _, hypervisor = read_oci(spec, "amd64")
    assert sizing is not None  # a sandbox's spec
    answer["sizing"] = {
        "cpus": float(round_float32(sizing.cpu)),
        "memory_mib": sizing.memory // MiB,
    }
    workload = Workload((), sizing, hypervisor=hypervisor, hypervisor_origin=str(spec))
    try:
        pod = pod_config(cfg, host, workload)
    except InputError as exc:
        answer["sandbox"] = {"error": exc.message}
        return answer
    answer["sandbox"] = _sandbox(pod, host, workload)
    return answer


@dataclass(frozen=True)
class Difference:
    """One field where kata-mem's answer is not Kata's."""

    field: str  # "load.default_memory", "sandbox.error", ...
    kata: Any
    ours: Any

    def __str__(self) -> str:
        return f"{self.field}: Kata {self.kata!r}, kata-mem {self.ours!r}"


def _refusals(part: str, kata: Answer, ours: Answer) -> list[Difference]:
    """Both refuse, or neither. Which of several wrong values a refusal names is not
    compared: each reader names the first it meets, in its own order."""
    if ("error" in kata) != ("error" in ours):
        return [Difference(f"{part}.error", kata.get("error"), ours.get("error"))]
    return []


def differences(kata: Answer, ours: Answer) -> list[Difference]:
    """Every field of Kata's recorded answer that kata-mem's does not give alike."""
    found: list[Difference] = []
    for part in ("load", "sizing", "sandbox"):
        if part not in kata:
            if part in ours:
                found.append(Difference(part, None, ours[part]))
            continue
        if part not in ours:
            found.append(Difference(part, kata[part], None))
            continue
        refused = _refusals(part, kata[part], ours[part])
        if refused and part == "load":
            return refused  # what follows a configuration one side refuses is not compared
        if refused or "error" in kata[part]:
            found += refused
            continue
        for key, want in kata[part].items():
            got = ours[part].get(key)
            if got != want:
                found.append(Difference(f"{part}.{key}", want, got))
    return found


@dataclass(frozen=True)
class Documented:
    """A difference docs/design/compared-with-kata.md names: ``topic`` is the start of
    its row; ``applies`` says whether a case's difference is this one."""

    topic: str
    applies: Callable[[dict[str, Any], Difference], bool]


def documented(case: dict[str, Any], diff: Difference) -> Optional[Documented]:
    """The documented difference that ``diff`` of ``case`` is, if any."""
    return next((d for d in DOCUMENTED if d.applies(case, diff)), None)


def _hypervisor(case: dict[str, Any]) -> str:
    """The ``[hypervisor.NAME]`` of the case's main file."""
    first = case["files"][0]
    text = packaged(first["fixture"]).read_text() if "fixture" in first else first["text"]
    found = re.search(r"^\[hypervisor\.([^\]]+)\]", text, re.M)
    return found.group(1) if found else ""


#: The sizing keys each Go hypervisor constructor does not read (katautils/config.go
#: ``newFirecrackerHypervisorConfig``, ``newStratovirtHypervisorConfig``,
#: ``newDragonballHypervisorConfig``, ``newRemoteHypervisorConfig``), as answer fields.
_UNREAD = {
    "firecracker": {"memory_offset", "enable_virtio_mem", "shared_fs"},
    "stratovirt": {"enable_virtio_mem"},
    "dragonball": {
        "memory_offset",
        "default_maxmemory",
        "enable_virtio_mem",
        "enable_hugepages",
        "shared_fs",
        "enable_annotations",
    },
    "remote": {
        "default_memory",
        "memory_slots",
        "memory_offset",
        "default_maxmemory",
        "default_vcpus",
        "default_maxvcpus",
        "enable_virtio_mem",
        "enable_hugepages",
        "shared_fs",
    },
}


def _unread_key(case: dict[str, Any], diff: Difference) -> bool:
    part, _, key = diff.field.partition(".")
    if diff.field == "load.error" and _hypervisor(case) not in ("qemu", ""):
        # Go checks shared_fs for every hypervisor (``sharedFS``; Cloud Hypervisor also
        # refuses virtio-9p), kata-mem for QEMU's, the only VMs it resizes.
        return "shared file system" in (diff.kata or "") or "virtio-9p" in (diff.kata or "")
    return part in ("load", "sandbox") and key in _UNREAD.get(_hypervisor(case), ())


def _runtime_rs_file(case: dict[str, Any], diff: Difference) -> bool:
    """A packaged runtime-rs file, or a table only runtime-rs drives."""
    first = case["files"][0]
    return (
        "runtime-rs" in first.get("fixture", "")
        or first.get("fixture") in ("configuration-dragonball.toml", "configuration-rs-fc.toml")
        or _hypervisor(case) in RUNTIME_RS_HYPERVISORS
    )


def _negative_uint64(case: dict[str, Any], diff: Difference) -> bool:
    return diff.field == "load.error" and bool(
        re.search(r"\] (default_maxmemory|memory_offset): expected .*, got -\d+$", diff.ours or "")
    )


def _unknown_dropin_key(case: dict[str, Any], diff: Difference) -> bool:
    return diff.field == "load.error" and bool(
        re.search(r"error applying key .* from drop-in file .*: key \S+ not found", diff.kata or "")
    )


def _several_hypervisors(case: dict[str, Any], diff: Difference) -> bool:
    """Kata configured more than one hypervisor over its loads of the case (the table
    records each it gave), and kata-mem refused the case for its several tables."""
    return (
        diff.field == "load.error"
        and len(case["expect"]["load"].get("hypervisor", ())) > 1
        and "expected exactly one [hypervisor.NAME]" in (diff.ours or "")
    )


def _cri_memory_wraps(case: dict[str, Any], diff: Difference) -> bool:
    """Go holds the CRI sandbox memory in MiB as a uint32 (``calculateVMResources``)."""
    return diff.field in ("sizing.memory_mib", "sandbox.default_memory") and (
        isinstance(diff.ours, int) and diff.ours > 0xFFFFFFFF
    )


def _nan_vcpus(case: dict[str, Any], diff: Difference) -> bool:
    return diff.field == "load.error" and bool(
        re.search(r"\] default_vcpus: expected .*, got nan$", diff.ours or "")
    )


def _cri_cpus_float32(case: dict[str, Any], diff: Difference) -> bool:
    """Go divides the float32s of quota and period (``utils.CalculateCPUsF``): beyond
    2^24 (a quota of 16.7 s) they are not the quota and period any more."""
    big = 1 << 24
    values = [
        case.get("annotations", {}).get(f"io.kubernetes.cri.sandbox-cpu-{k}", "0")
        for k in ("quota", "period")
    ]
    return diff.field in ("sizing.cpus", "sandbox.default_vcpus") and any(
        v.lstrip("+-").isdigit() and abs(int(v)) > big for v in values
    )


def _static_arch_cap(case: dict[str, Any], diff: Difference) -> bool:
    """Go caps the static maximum by the architecture later (``validateHypervisorConfig``,
    after ``oci.SandboxConfig``), and a workload of 2^32 vCPUs or more wraps its uint32
    (``RoundUpNumVCPUs``) to 0, floored to 1: kata-mem caps it at once."""
    return (
        diff.field == "sandbox.default_maxvcpus"
        and diff.ours == 240
        and (diff.kata > 240 or (diff.kata <= 1 and _workload_cpus(case) >= 1 << 32))
    )


def _workload_cpus(case: dict[str, Any]) -> float:
    return float(case.get("expect", {}).get("sizing", {}).get("cpus") or 0)


def _uint32_annotation(case: dict[str, Any], diff: Difference) -> bool:
    return diff.field == "sandbox.error" and "Kata stores it in a uint32" in (diff.ours or "")


def _nan_annotation(case: dict[str, Any], diff: Difference) -> bool:
    return diff.field == "sandbox.error" and "not a number of vCPUs" in (diff.ours or "")


def _annotation(case: dict[str, Any], name: str) -> Optional[str]:
    annotations: dict[str, str] = case.get("annotations", {})
    return annotations.get("io.katacontainers.config.hypervisor." + name)


def _zero_max_vcpus(case: dict[str, Any], diff: Difference) -> bool:
    value = _annotation(case, "default_max_vcpus")
    return (
        diff.field == "sandbox.default_maxvcpus"
        and diff.kata == 0
        and value is not None
        and parse_uint(value) == 0
    )


def _zero_vcpus(case: dict[str, Any], diff: Difference) -> bool:
    """Go keeps the annotation's 0 (``setFloat32WithCheck``) and adds a static workload
    to it; ``validateHypervisorConfig`` makes 0 one vCPU only later."""
    value = _annotation(case, "default_vcpus")
    return (
        diff.field in ("sandbox.default_vcpus", "sandbox.default_maxvcpus")
        and value is not None
        and parse_float32(value) == 0
    )


DOCUMENTED: tuple[Documented, ...] = (
    Documented("a runtime-rs configuration read by the Go runtime", _runtime_rs_file),
    Documented("keys a hypervisor other than QEMU does not read", _unread_key),
    Documented("a negative `default_maxmemory` or `memory_offset`", _negative_uint64),
    Documented("a drop-in key Kata does not know", _unknown_dropin_key),
    Documented("several `[hypervisor.NAME]` tables", _several_hypervisors),
    Documented("`default_vcpus = nan` in a file", _nan_vcpus),
    Documented("a CRI sandbox memory of 4 PiB or more", _cri_memory_wraps),
    Documented("the CRI sandbox CPUs of a quota or period beyond 2^24", _cri_cpus_float32),
    Documented("static sizing, vCPUs", _static_arch_cap),
    Documented("annotation values", _nan_annotation),
    Documented(
        "`memory_slots`/`default_memory`/`default_max_vcpus` annotation above 2^32−1",  # noqa: RUF001 (the row's words)
        _uint32_annotation,
    ),
    Documented('annotation `default_max_vcpus = "0"`', _zero_max_vcpus),
    Documented('annotation `default_vcpus = "0"` with static sizing', _zero_vcpus),
)
