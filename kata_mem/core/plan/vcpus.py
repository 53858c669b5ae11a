"""The vCPUs: the maximum, the ``default_vcpus`` the VM boots with, and the target, the
containers' CPUs added as Kata adds them, in float32 (:func:`plan_vcpus`). runtime-rs keeps
the same sum in src/runtime-rs/crates/resource/src/cpu_mem/cpu.rs
(``CpuResource::calc_cpu_resources``) and the boot count in cpu_mem/initial_size.rs."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

from kata_mem.core.errors import InputError
from kata_mem.core.golang import FLOAT32_OVERFLOW, round_float32
from kata_mem.core.model import (
    ARCHES,
    Clamp,
    Demand,
    HostFacts,
    Note,
    SizingConfig,
    VcpuBase,
    VcpuCause,
    VcpuPlan,
)
from kata_mem.core.plan.workload import runtime_rs_static

#: Per-architecture vCPU caps (Kata ``govmm`` ``vmm_*.go``); arm64 assumes GICv3.
ARCH_MAX_VCPUS = {"amd64": 240, "arm64": 123, "ppc64le": 128, "s390x": 248, "riscv64": 512}
assert tuple(ARCH_MAX_VCPUS) == ARCHES
#: No CPU, and one (Fractions are immutable: each is shared).
_ZERO, _ONE = Fraction(0), Fraction(1)


def _float32(cpus: Fraction) -> Fraction:
    """A number of vCPUs as Kata holds it, a float32 (:func:`round_float32`); a sum of two
    is their float32 addition (IEEE 754: the exact sum rounded once). Beyond float32's
    range, where Kata's would be +Inf, it stays as it is: no such workload reaches Kata
    (the kubelet's CFS quota is an int64 of microseconds), and the vCPU maximum clamps it
    either way."""
    return round_float32(cpus) if abs(cpus) < FLOAT32_OVERFLOW else cpus


def _arch_cap(host: HostFacts) -> int:
    """The architecture's vCPU cap (govmm ``MaxVCPUs``).

    :raises InputError: an architecture kata-mem does not know."""
    arch_cap = ARCH_MAX_VCPUS.get(host.arch)
    if arch_cap is None:
        raise InputError(f"host arch {host.arch!r}: expected one of {', '.join(ARCHES)} (Go names)")
    return arch_cap


def vcpu_ceiling(cfg: SizingConfig, host: HostFacts) -> tuple[int, VcpuCause]:
    """The vCPU maximum a configuration gives on ``host``, and what binds it: Kata
    ``defaultMaxVCPUs`` (katautils/config.go): ``default_maxvcpus``, the host's CPUs when
    it is 0 or not below them, never above the architecture's cap.

    :raises InputError: an architecture kata-mem does not know."""
    arch_cap = _arch_cap(host)
    cause: VcpuCause
    if cfg.default_maxvcpus == 0 or cfg.default_maxvcpus >= host.cpus:
        ceiling, cause = host.cpus, "host_cpus"
    else:
        ceiling, cause = cfg.default_maxvcpus, "default_maxvcpus"
    if arch_cap < ceiling:
        ceiling, cause = arch_cap, "arch"
    return ceiling, cause


def default_vcpus(cfg: SizingConfig, host: HostFacts) -> Fraction:
    """The vCPUs a configuration boots with on ``host`` before any workload: Kata
    ``defaultVCPUs`` (katautils/config.go): ``default_vcpus`` (a float32), the usable CPUs
    (the host's, at most the architecture's cap: ``getCurrentCpuNum``) when it is negative
    or above them, 1 when it is 0.

    :raises InputError: an architecture kata-mem does not know."""
    default = cfg.default_vcpus
    usable = min(host.cpus, _arch_cap(host))
    # Compared in integers: n/d > k exactly when n > k * d (d > 0), without a Fraction.
    if default.numerator < 0 or default.numerator > usable * default.denominator:
        return Fraction(usable)
    if default.numerator == 0:
        return _ONE
    return default


def plan_vcpus(cfg: SizingConfig, host: HostFacts, need: Demand) -> tuple[VcpuPlan, list[Note]]:
    """Kata ``defaultMaxVCPUs``/``defaultVCPUs``; target = ceil(default + sum of quota/period).

    ``default`` is the value the VM actually boots with: never above the maximum
    (runtime-rs ``CpuInfo::adjust_config``; the Go runtime would pass QEMU
    ``-smp default,maxcpus=max``, which QEMU refuses).

    In float32, as Kata holds vCPUs (virtcontainers ``NumVCPUsF``, runtime-rs ``f32``):
    ``default_vcpus`` was read as one (:func:`kata_mem.core.golang.toml_float32`,
    ``parse_float32``); the containers' CPUs, summed exactly
    (:func:`~kata_mem.core.plan.workload.containers_peak`), are rounded to one once, as
    runtime-rs rounds its exact sum (``calc_cpu_resources``:
    ``quota_vcpu as f32``; the Go runtime adds float32 shares one by one,
    ``calculateSandboxCPUs``, which can end a hair above a whole CPU: docs/design/
    compared-with-kata.md, "vCPU sums"); the two are added in float32 (Go ``updateResources``
    ``sandboxVCPUs += NumVCPUsF``, ``oci.SandboxConfig``; runtime-rs ``setup_config``) and
    rounded up (``RoundUpNumVCPUs``). So ``default_vcpus = 2.00000001`` boots 2.

    With static sizing both runtimes boot ceil(default + workload) vCPUs and set
    the maximum to that, even above ``default_maxvcpus`` or the host's CPUs
    (Go ``oci.SandboxConfig``, runtime-rs ``InitialSizeManager::setup_config``);
    only the architecture's cap still applies (Go ``validateHypervisorConfig``).
    """
    arch_cap = _arch_cap(host)
    ceiling, cause = vcpu_ceiling(cfg, host)
    default = default_vcpus(cfg, host)
    work_cpu = _float32(need.cpu)
    notes: list[Note] = []
    raised_from: Optional[Fraction] = None
    added_to: VcpuBase = "default_vcpus"
    base, containers = default, work_cpu
    static = runtime_rs_static(cfg, need)
    if static is not None:
        # runtime-rs InitialSizeManager::setup_config: with any workload, the boot vCPUs
        # are overhead_vcpus + the workload's, at least 1, replacing default_vcpus; the
        # maximum is always their ceiling, raised or lowered from default_maxvcpus.
        mem, cpu = static
        if cpu > 0 or mem > 0:
            added_to, base = "overhead_vcpus", cfg.overhead_vcpus or _ZERO
            default = _float32(base + work_cpu)
            if default < _ONE:
                raised_from, default = default, _ONE
        boot = math.ceil(default)
        if boot != ceiling and boot <= arch_cap:
            notes.append(
                Note(
                    "vcpus",
                    f"runtime-rs static_sandbox_resource_mgmt: the vCPU maximum is set from "
                    f"{ceiling} ({cause}) to the {boot} vCPUs the VM boots with, as runtime-rs "
                    "does",
                )
            )
        ceiling, cause = min(boot, arch_cap), "arch"
        work_cpu = _ZERO  # in the boot vCPUs now
    elif cfg.static_sandbox_resource_mgmt:
        boot = max(math.ceil(_float32(default + work_cpu)), 1)
        if boot > ceiling and boot <= arch_cap:
            notes.append(
                Note(
                    "vcpus",
                    f"static_sandbox_resource_mgmt: the vCPU maximum is raised from {ceiling} "
                    f"({cause}) to the {boot} vCPUs the VM boots with, as Kata does",
                )
            )
        ceiling, cause = min(boot, arch_cap), "arch"
    elif default.numerator > ceiling * default.denominator:
        default = base = Fraction(ceiling)
    requested = _float32(default + work_cpu)
    target = math.ceil(requested)
    clamps: tuple[Clamp, ...] = ()
    if target > ceiling:
        clamps = (
            Clamp(
                cause, ceiling, f"requested {float(requested):g} clamped to {ceiling} by {cause}"
            ),
        )
        target = ceiling
    return (
        VcpuPlan(
            host=host.cpus,
            max=ceiling,
            default=default,
            requested=requested,
            target=target,
            clamps=clamps,
            added_to=added_to,
            base=base,
            containers=containers,
            raised_from=raised_from,
        ),
        notes,
    )
