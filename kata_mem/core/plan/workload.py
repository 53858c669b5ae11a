"""What a workload needs (:func:`demand`), and the size Kata boots a VM with for it when it
sizes the VM at boot (:func:`static_size`): the plan's first stage, which the memory plan
and the vCPUs share. runtime-rs keeps the same ground in
src/runtime-rs/crates/resource/src/cpu_mem/initial_size.rs."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Optional, TypeVar, Union

from kata_mem.core.errors import ConfigError
from kata_mem.core.model import (
    Container,
    Demand,
    Note,
    PodResources,
    SizingConfig,
    Workload,
    WorkloadSource,
)
from kata_mem.core.units import MiB, to_mib_floor

T = TypeVar("T", int, Fraction)
#: No CPU (Fractions are immutable: one is shared).
_ZERO = Fraction(0)


def containers_peak(containers: tuple[Container, ...]) -> tuple[int, Fraction]:
    """Memory (bytes) and CPUs the containers need at their peak.

    Stopped containers count nothing and a container without a limit adds 0
    (Kata ``calculateSandboxMemory``). Init containers run one at a time before
    the app containers, next to the restartable sidecars declared before them,
    so the peak is the larger of the biggest init phase and the app containers
    plus sidecars (Kubernetes' effective pod limits). With only app containers
    this is Kata's plain sum.

    CPUs are Σ quota/period; when that is 0 (no container has a quota), the
    sizes of the containers' cpusets are summed instead (Kata
    ``calculateSandboxCPUs``, src/runtime/virtcontainers/sandbox.go: every
    non-stopped container's cpuset counts, quota or not, but only when the
    quotas add up to nothing).
    """
    mem, cpu = _peaks(containers, _positive_cpu)
    if cpu == 0:
        cpu = _peaks(containers, _cpuset_cpus)[1]
    return mem, cpu


def _positive_cpu(c: Container) -> Fraction:
    # A Fraction's sign is its numerator's (the denominator is always positive): the
    # same as max(c.cpu, 0), without a Fraction comparison.
    return c.cpu if c.cpu.numerator > 0 else _ZERO


def _cpuset_cpus(c: Container) -> int:
    return max(c.cpuset_cpus, 0)


def _container_memory(c: Container) -> int:
    return max(c.memory_limit, 0) + max(c.hugepages_limit, 0)


def _peaks(
    containers: tuple[Container, ...],
    cpu_of: Callable[[Container], Union[Fraction, int]],
    mem_of: Callable[[Container], int] = _container_memory,
) -> tuple[int, Fraction]:
    # The CPUs are added in integers, exactly: each container's share is counted in
    # units of 1/scale of a CPU, scale the least common multiple of the shares'
    # denominators (1 when every share is whole), so that every sum and maximum below is
    # one of ints; a Fraction is made once, of the peak. (Fraction arithmetic made and
    # normalised a new object for every partial sum: docs/benchmarks.md, "Plan-only answer".)
    live = [(c, cpu_of(c)) for c in containers if c.state != "stopped"]
    scale = math.lcm(*[cpu.denominator for _, cpu in live])
    sidecar_mem = sidecar_cpu = app_mem = app_cpu = init_mem = init_cpu = 0
    for c, share in live:
        mem = max(mem_of(c), 0)
        cpu = share.numerator * (scale // share.denominator)
        if c.role == "init":
            init_mem = max(init_mem, sidecar_mem + mem)
            init_cpu = max(init_cpu, sidecar_cpu + cpu)
        elif c.role == "sidecar":
            sidecar_mem += mem
            sidecar_cpu += cpu
        else:
            app_mem += mem
            app_cpu += cpu
    cpu_peak = max(init_cpu, app_cpu + sidecar_cpu)
    return max(init_mem, app_mem + sidecar_mem), (Fraction(cpu_peak, scale) if cpu_peak else _ZERO)


def _bounded(pod: Optional[T], peak: T, unlimited: bool, live: bool) -> tuple[T, WorkloadSource]:
    """One resource under a pod-level limit (KEP-2837): the limit bounds the whole pod,
    and a container without a limit of its own may use up to it. So the workload is
    the pod-level limit when some container has no limit, else the smaller of it and
    the containers' peak. The smaller figure is kata-mem's choice: the kubelet's pod
    cgroup is the pod-level limit whenever one is set (pkg/kubelet/cm/helpers_linux.go
    ``ResourceConfigForPod``; component-helpers resource/helpers.go ``PodLimits``: the
    pod-level value replaces the aggregate), but a VM needs only what its containers
    can use, and the cgroup at the full limit still has room for it. A
    sandbox without (live) containers needs nothing of its own yet: it grows as
    they come, never booted to the limit only to shrink."""
    if pod is None:
        return peak, "containers"
    if live and unlimited:
        return pod, "pod_resources"
    if pod < peak:
        return pod, "pod_resources"
    return peak, "containers"


def _no_cpu(c: Container) -> Fraction:
    return _ZERO


def _page_sizes(pairs: tuple[tuple[int, int], ...], total: Optional[int]) -> dict[int, int]:
    """Hugepage limits by page size; 0 stands for "sizes not named" (the total of a
    workload that names none)."""
    if pairs:
        return {size: limit for size, limit in pairs if limit > 0}
    return {0: total} if total else {}


def _phases(containers: tuple[Container, ...]) -> list[list[Container]]:
    """The sets of containers that run at once, as :func:`_peaks` counts them: each init
    container with the sidecars declared before it, then the app containers with every
    sidecar (component-helpers resource/helpers.go ``aggregateContainerResourcesByFn``)."""
    sidecars: list[Container] = []
    phases: list[list[Container]] = []
    apps: list[Container] = []
    for c in containers:
        if c.state == "stopped":
            continue
        if c.role == "init":
            phases.append([*sidecars, c])
        elif c.role == "sidecar":
            sidecars.append(c)
        else:
            apps.append(c)
    phases.append([*apps, *sidecars])
    return [phase for phase in phases if phase]


def _pod_hugepages(
    pod: PodResources, containers: tuple[Container, ...]
) -> tuple[int, WorkloadSource]:
    """Hugepages under pod-level limits, each page size on its own: the kubelet writes one
    hugetlb limit per size for the pod cgroup (pkg/kubelet/cm/helpers_linux.go
    ``HugePageLimits``), and the API server fills a size the pod does not name from its
    containers' total (pkg/apis/core/v1/defaults.go ``defaultHugePagePodLimits``), so a
    limit on 2 MiB pages never bounds 1 GiB pages. In each set of containers that runs at
    once, a size is the pod's limit when some container there has none of that size (the
    kubelet gives such a container the pod's limit of that size, kubernetes PR #131089,
    pkg/kubelet/kuberuntime/kuberuntime_container_linux.go
    ``GetHugepageLimitsFromResources``; before it, a limit of 0), else the smaller of the
    pod's limit and their sum; the workload is the largest set's total (:func:`_bounded`,
    size by size). Sizes the workload does not name count as one size (0)."""
    caps = _page_sizes(pod.hugepage_limits, pod.hugepages)
    peak = 0
    source: WorkloadSource = "containers"
    for phase in _phases(containers):
        limits = [_page_sizes(c.hugepage_limits, c.hugepages_limit) for c in phase]
        total, by_pod = 0, False
        for size in sorted(set(caps).union(*limits)):
            used, src = _bounded(
                caps.get(size),
                sum(limit.get(size, 0) for limit in limits),
                any(size not in limit for limit in limits),
                True,
            )
            total += used
            by_pod = by_pod or src == "pod_resources"
        if total > peak or (total == peak and by_pod):
            peak, source = total, "pod_resources" if by_pod else "containers"
    return peak, source


def demand(cfg: SizingConfig, workload: Workload) -> tuple[Demand, list[Note]]:
    """What the workload needs (docs, "Sizing rules": workload, pod-level limits), with
    where each part came from.

    The containers' peak (:func:`containers_peak`), under the pod-level limits when the
    workload gives them (:func:`_bounded`). CRI sandbox annotations size the sandbox alone
    when no container is given or with static sizing, as Kata's ``CalculateSandboxSizing``
    (src/runtime/pkg/oci/utils.go) does. With containers, they are a snapshot taken when
    the sandbox was created: containerd writes them once in the sandbox spec
    (internal/cri/server/podsandbox/sandbox_run_linux.go) and CRI-O too
    (server/sandbox_run_linux.go ``setupSandboxResources``); neither rewrites them on
    ``UpdatePodSandboxResources``. So they only raise what containers without a limit
    count (a pod-level limit they carry) and never bound a container's own limit, which
    a later in-place resize may have raised past the snapshot.
    """
    live = tuple(c for c in workload.containers if c.state != "stopped")
    memory, cpu = containers_peak(workload.containers)  # memory with the hugepages: one peak
    hugepages = 0
    notes: list[Note] = []
    sizing, pod = workload.sizing, workload.pod
    if sizing is not None and (not workload.containers or cfg.static_sandbox_resource_mgmt):
        notes.append(
            Note(
                "cri_annotations",
                f"sandbox sized from {sizing.source} ({sizing.origin or 'sandbox spec'})",
            )
        )
        return Demand(
            sizing.memory,
            0,
            sizing.cpu,
            "cri_annotations",
            "containers",
            "cri_annotations",
            sizing.origin,
        ), notes
    no_memory = any(c.memory_limit <= 0 for c in live)
    no_cpu = any(c.cpu.numerator <= 0 for c in live)  # a Fraction's sign is its numerator's
    if pod is not None:
        huge = 0
        by_huge: WorkloadSource = "containers"
        if pod.memory is not None or pod.hugepages is not None or pod.hugepage_limits:
            # Bounded one by one, so each its own peak.
            memory = _peaks(workload.containers, _no_cpu, lambda c: c.memory_limit)[0]
            huge, by_huge = _pod_hugepages(pod, workload.containers)
        mem, by_mem = _bounded(pod.memory, memory, no_memory, bool(live))
        cpus, by_cpu = _bounded(pod.cpu, cpu, no_cpu, bool(live))
        return Demand(mem, huge, cpus, by_mem, by_huge, by_cpu, pod.origin), notes
    if sizing is None:
        return Demand(memory, hugepages, cpu), notes
    mem_from: WorkloadSource = "containers"
    cpu_from: WorkloadSource = "containers"
    if no_memory and sizing.memory > memory:
        memory, mem_from = sizing.memory, "cri_annotations"
    if no_cpu and sizing.cpu > cpu:
        cpu, cpu_from = sizing.cpu, "cri_annotations"
    used = mem_from == "cri_annotations" or cpu_from == "cri_annotations"
    notes.append(
        Note(
            "cri_annotations",
            f"CRI sandbox resources ({sizing.origin or 'sandbox spec'}) bound the containers "
            "without a limit: the pod-level limit they carry counts for them"
            if used
            else "CRI sandbox-sizing annotations not used: with static_sandbox_resource_mgmt "
            "off the containers are summed (as Kata does), and the annotations, a snapshot "
            "from the sandbox's creation, only count for containers without a limit",
        )
    )
    return Demand(memory, hugepages, cpu, mem_from, "containers", cpu_from, sizing.origin), notes


def pod_overhead(cfg: SizingConfig, workload: Workload) -> tuple[Optional[int], str]:
    """The pod's RuntimeClass overhead and where it came from: the Pod's
    ``spec.overhead.memory`` or the sandbox annotations (carried by the workload),
    else ``[kata_mem] pod_overhead_mib``; ``(None, "")`` when nothing gives it."""
    if workload.overhead is not None:
        return workload.overhead, workload.overhead_origin
    if cfg.settings.pod_overhead is not None:
        return cfg.settings.pod_overhead, "[kata_mem] pod_overhead_mib"
    return None, ""


def runtime_rs_static(cfg: SizingConfig, need: Demand) -> Optional[tuple[int, Fraction]]:
    """The workload as runtime-rs's static sizing reads it, when the configuration is
    runtime-rs's (``cfg.runtime``) with ``static_sandbox_resource_mgmt`` (kata PR #13173,
    src/runtime-rs/crates/resource/src/cpu_mem/initial_size.rs): memory in whole MiB,
    floored and then rounded up to an even MiB (``convert_memory_to_mb``: "memory size
    must be 2MB aligned for hugepage support"), and the CPUs unrounded; ``None`` otherwise
    (the Go runtime's static sizing, which adds the workload to ``default_memory`` and
    ``default_vcpus``). runtime-rs applies its rule whether or not ``overhead_vcpus`` and
    ``overhead_memory`` are set: both default to 0 (``#[serde(default)]``)."""
    if not cfg.static_sandbox_resource_mgmt or cfg.runtime != "runtime-rs":
        return None
    mib = to_mib_floor(need.total_memory)
    return (mib + mib % 2) * MiB, need.cpu


def static_size(cfg: SizingConfig, need: Demand) -> Optional[int]:
    """The memory Kata boots a VM of ``cfg`` with for a workload of ``need`` when it sizes
    the VM at boot (``static_sandbox_resource_mgmt``; None when it does not): runtime-rs's
    rule (:func:`runtime_rs_static`, :func:`_runtime_rs_memory`), or the Go runtime's,
    ``default_memory`` + the workload in whole MiB, floored (pkg/oci/utils.go
    ``calculateVMResources``: memory / 1024 / 1024; ``SandboxConfig``). kata-mem resizes
    such a VM after boot to the size Kata would have booted it with for the workload now,
    so that a sandbox is the same size whether its workload came before boot or after.

    :raises ConfigError: runtime-rs's size comes to 0 MiB (:func:`_runtime_rs_memory`).
    """
    if not cfg.static_sandbox_resource_mgmt:
        return None
    static = runtime_rs_static(cfg, need)
    if static is not None:
        return _runtime_rs_memory(cfg, *static)
    return cfg.default_memory + to_mib_floor(need.total_memory) * MiB


def _runtime_rs_memory(cfg: SizingConfig, mem: int, cpu: Fraction) -> int:
    """runtime-rs ``InitialSizeManager::setup_config``: with any workload (CPU or memory),
    the boot memory is ``overhead_memory`` + the workload's, replacing ``default_memory``
    (a pod with a CPU limit only boots with ``overhead_memory`` alone); without any, it is
    ``default_memory``. The size is what the VM boots with, whatever the sizing model.

    :raises ConfigError: the size comes to 0 MiB (runtime-rs
        ``validate_non_zero_sandbox_memory``), naming the key that makes it so.
    """
    if cpu <= 0 and mem <= 0:
        return cfg.default_memory
    memory = (cfg.overhead_memory or 0) + mem
    if memory == 0:
        key = cfg.origin(f"hypervisor.{cfg.hypervisor}.overhead_memory")
        shown = (
            key.name()
            if key.kind == "file"
            else f"{cfg.path}: [hypervisor.{cfg.hypervisor}] overhead_memory (unset, 0)"
        )
        raise ConfigError(
            f"{shown}: computed sandbox memory is 0 MiB for hypervisor '{cfg.hypervisor}'; "
            "set a non-zero memory limit or configure non-zero default_memory/overhead_memory "
            "(as runtime-rs refuses it: InitialSizeManager::setup_config)"
        )
    return memory
