"""Kata's per-pod hypervisor annotations (``io.katacontainers.config.hypervisor.*``) that
touch sizing, or the memory behind a DIMM (``enable_hugepages``, ``shared_fs``), applied to
a configuration as Kata applies them. Pure.

Kata reads them from the sandbox's OCI spec, where containerd and CRI-O put the pod
annotations the runtime's ``pod_annotations`` lets through. kata-mem follows the Go runtime
(src/runtime/pkg/oci/utils.go ``addAnnotations``, ``addHypervisorMemoryOverrides``,
``addHypervisorCPUOverrides``, ``addHypervisorVirtioFsOverrides``, at kata-containers
7c6ba40c): an annotation under the
hypervisor prefix that the configuration's ``enable_annotations`` does not allow fails the
sandbox, and so does a value Kata refuses; kata-mem refuses both (exit 4) with Kata's words.
runtime-rs (src/libs/kata-types/src/annotations/mod.rs ``update_config_by_annotation``)
ignores a disallowed annotation with a log line and accepts ``default_memory`` with units
("2 GiB"); the docs ("Compared with Kata") say why kata-mem does not.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

from kata_mem.core import golang
from kata_mem.core.errors import InputError
from kata_mem.core.frozen import replace
from kata_mem.core.model import HostFacts, Origin, SizingConfig, Workload
from kata_mem.core.units import MiB

PREFIX = "io.katacontainers.config.hypervisor."
#: virtcontainers/hypervisor.go ``MinHypervisorMemory`` (MiB).
MIN_HYPERVISOR_MEMORY_MIB = 256
#: The hypervisor name that Kata exempts from the memory and CPU checks (``RemoteHypervisor``).
REMOTE = "remote"
_UINT32_MAX = (1 << 32) - 1
#: The sizing annotations kata-mem reads a value from, and the boolean ones whose value
#: Kata checks (``setBool``) though they change no size kata-mem plans.
SIZING = (
    "default_memory",
    "memory_slots",
    "memory_offset",
    "enable_virtio_mem",
    "enable_hugepages",
    "default_vcpus",
    "default_max_vcpus",
)
CHECKED_BOOLS = ("enable_mem_prealloc", "reclaim_guest_freed_memory", "enable_guest_swap")
#: The file systems the ``shared_fs`` annotation may name, which also decide the memory
#: behind a DIMM (kata_mem.core.backing): Go ``addHypervisorVirtioFsOverrides``
#: (``config.Virtio9P``, ``config.VirtioFS``); it refuses any other.
SHARED_FS = ("virtio-9p", "virtio-fs")


def enabled(patterns: tuple[str, ...], key: str) -> bool:
    """Whether ``enable_annotations`` allows the annotation ``key``: Go
    ``checkAnnotationNameIsValid``/``regexpContains`` search each pattern, unanchored, in
    the name after the prefix (so ``default_memory`` also allows any longer name that
    contains it, and ``^default_memory$`` only that one); a name outside the prefix
    passes. The patterns are Go regexps (RE2 syntax, :func:`golang.regexp_match`), and
    one that Go does not compile allows nothing (``regexpContains`` drops the error).
    """
    if not key.startswith(PREFIX):
        return True
    name = key[len(PREFIX) :]
    return any(golang.regexp_match(p, name) for p in patterns)


def _not_compiled(patterns: tuple[str, ...]) -> str:
    """What Go says of each pattern it does not compile, for the refusal's message."""
    refused = [(p, golang.compile_regexp(p)[1]) for p in patterns]
    return "".join(
        f"; {golang.shorten(p)!r} is not a Go regexp ({why}), so it allows nothing"
        for p, why in refused
        if why
    )


def _fail(where: str, key: str, value: str, why: str) -> InputError:
    return InputError(f"{where}: annotation {key} {value[:80]!r}: {why}")


def _uint(where: str, key: str, value: str, bits: int = 64) -> int:
    """Go ``strconv.ParseUint(value, 10, 64)`` (:func:`golang.parse_uint`: digits only, no
    sign, space, underscore or unit), as ``setUint`` reads it. A value beyond the uint32
    Kata stores it in (which Go truncates silently) is refused too."""
    parsed = golang.parse_uint(value)
    if parsed is None:
        raise _fail(
            where,
            key,
            value,
            f"Error parsing annotation for {key}: Please specify positive numeric value "
            "(Kata's Go runtime, setUint: a decimal integer of MiB, vCPUs or slots)",
        )
    if bits == 32 and parsed > _UINT32_MAX:
        raise _fail(where, key, value, f"above {_UINT32_MAX}: Kata stores it in a uint32")
    return parsed


def _bool(where: str, key: str, value: str) -> bool:
    parsed = golang.parse_bool(value)
    if parsed is None:
        raise _fail(
            where,
            key,
            value,
            f"Error parsing annotation for {key}: Please specify boolean value 'true|false' "
            "(Go strconv.ParseBool)",
        )
    return parsed


def _vcpus(where: str, key: str, value: str) -> Fraction:
    """``setFloat32WithCheck``: Go ``strconv.ParseFloat(value, 32)``
    (:func:`golang.parse_float32`: hexadecimal ``0x1p1``, underscores, ``Inf``), refused
    when it fails or is negative, and infinity as above the largest float32. The value is
    the float32 Go rounds it to (``float32Value := float32(float64Value)``): 2.00000001 is
    2, compared with the host's CPUs and planned as such, as Kata does."""
    parsed = golang.parse_float32(value)
    if parsed is None or parsed < 0:
        raise _fail(
            where,
            key,
            value,
            f"Error parsing annotation for {key}: Please specify positive numeric value",
        )
    if isinstance(parsed, float) and math.isnan(parsed):
        # Go accepts NaN (no comparison refuses it) and Kata then rounds NaN vCPUs up to
        # an integer, which Go leaves undefined: no VM could be sized from it.
        raise _fail(
            where,
            key,
            value,
            "not a number of vCPUs (Go's ParseFloat reads NaN, which Kata's Go runtime "
            "passes on unchecked); expected a number of vCPUs, e.g. 1.5",
        )
    if isinstance(parsed, float):  # +Inf
        raise _fail(
            where,
            key,
            value,
            f"Error parsing annotation for {key}: The number exceeds the maximum allowed "
            "for its type",
        )
    return parsed


def sandbox_config(
    cfg: SizingConfig,
    host: HostFacts,
    annotations: tuple[tuple[str, str], ...],
    where: str,
    arch_max_vcpus: int,
) -> SizingConfig:
    """``cfg`` as the pod's hypervisor annotations change it; ``where`` names the input
    they came from, ``arch_max_vcpus`` the architecture's vCPU cap (govmm ``MaxVCPUs``).

    :raises InputError: an annotation that ``enable_annotations`` does not allow, or a
        value Kata refuses, each named with its value and Kata's message.
    """
    hv = [(k, v) for k, v in annotations if k.startswith(PREFIX)]
    if not hv:
        return cfg
    for key, value in hv:  # Go checks every name before any value (addAnnotations)
        if not enabled(cfg.enable_annotations, key):
            allowed = ", ".join(repr(golang.shorten(p)) for p in cfg.enable_annotations) or "none"
            raise _fail(
                where,
                key,
                value,
                f"annotation {key} is not enabled (Kata's Go runtime refuses the sandbox: "
                f"addAnnotations); {cfg.path}: [hypervisor.{cfg.hypervisor}] "
                f"enable_annotations allows {allowed}{_not_compiled(cfg.enable_annotations)}",
            )
    remote = cfg.hypervisor == REMOTE
    changes: dict[str, object] = {}
    sources = dict(cfg.sources)
    for key, value in hv:
        name = key[len(PREFIX) :]
        if name not in SIZING and name not in CHECKED_BOOLS and name != "shared_fs":
            continue
        got: Optional[tuple[str, object]] = None
        if name == "default_memory":
            mib = _uint(where, key, value)
            if mib < MIN_HYPERVISOR_MEMORY_MIB and not remote:
                raise _fail(
                    where,
                    key,
                    value,
                    f"Memory specified in annotation {key} is less than minimum required "
                    f"{MIN_HYPERVISOR_MEMORY_MIB}, please specify a larger value",
                )
            if mib > _UINT32_MAX:
                raise _fail(where, key, value, f"above {_UINT32_MAX}: Kata stores it in a uint32")
            got = ("default_memory", mib * MiB)
        elif name == "memory_slots":
            slots = _uint(where, key, value, bits=32)
            got = ("memory_slots", slots) if slots > 0 else None  # Go: 0 is ignored
        elif name == "memory_offset":
            offset = _uint(where, key, value)
            got = ("memory_offset", offset * MiB) if offset > 0 else None
        elif name in ("enable_virtio_mem", "enable_hugepages"):
            got = (name, _bool(where, key, value))
        elif name in CHECKED_BOOLS:
            _bool(where, key, value)
        elif name == "shared_fs":
            if value not in SHARED_FS:
                raise _fail(
                    where,
                    key,
                    value,
                    f"Invalid hypervisor shared file system {value} specified for annotation "
                    f"shared_fs, (supported file systems: [{' '.join(SHARED_FS)}])",
                )
            got = ("shared_fs", value)
        elif name == "default_vcpus":
            vcpus = _vcpus(where, key, value)
            if vcpus > host.cpus and not remote:
                raise _fail(
                    where,
                    key,
                    value,
                    f"Number of cpus {float(vcpus):f} specified in annotation default_vcpus "
                    f"is greater than the number of CPUs {host.cpus} on the system",
                )
            got = ("default_vcpus", vcpus)
        else:  # default_max_vcpus
            most = _uint(where, key, value, bits=32)
            if most > host.cpus and not remote:
                raise _fail(
                    where,
                    key,
                    value,
                    f"Number of cpus {most} in annotation default_maxvcpus is greater than "
                    f"the number of CPUs {host.cpus} on the system",
                )
            if cfg.hypervisor == "qemu" and most > arch_max_vcpus:
                raise _fail(
                    where,
                    key,
                    value,
                    f"Number of cpus {most} in annotation default_maxvcpus is greater than "
                    f"max no of CPUs {arch_max_vcpus} supported for qemu",
                )
            got = ("default_maxvcpus", most)
        if got is not None:
            changes[got[0]] = got[1]
            sources[f"hypervisor.{cfg.hypervisor}.{got[0]}"] = Origin(
                "override", where, key, value, f"annotation {key} = {value}"
            )
    if not changes:
        return cfg
    return replace(cfg, **changes, sources=tuple(sources.items()))


def pod_config(cfg: SizingConfig, host: HostFacts, workload: Workload) -> SizingConfig:
    """The configuration a sandbox of ``workload`` runs with: ``cfg`` with the pod's
    hypervisor annotations applied (:func:`sandbox_config`). Every interface plans
    with it, so that preview, apply, the shim and the service agree.

    :raises InputError: as :func:`sandbox_config`.
    """
    from kata_mem.core.planner import ARCH_MAX_VCPUS

    return sandbox_config(
        cfg,
        host,
        workload.hypervisor,
        workload.hypervisor_origin or "annotations",
        ARCH_MAX_VCPUS.get(host.arch, 0),
    )


def hypervisor_annotations(annotations: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Kata's per-pod hypervisor annotations among ``annotations``, in their order."""
    return tuple((k, v) for k, v in annotations.items() if k.startswith(PREFIX))
