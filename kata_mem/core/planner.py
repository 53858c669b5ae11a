"""The sizing planner: pure functions from configuration, host, workload and VM
state to a :class:`~kata_mem.core.model.Plan`.

No I/O, no clock, no environment. ``preview`` prints exactly the plan that
``apply`` carries out. Each rule names the Kata behaviour it mirrors; where
kata-mem deliberately differs, the docstring says why (docs, "Compared with Kata").

One module (about 1,400 lines) because the memory plan is one computation:
:func:`_plan_memory` applies every bound (maximum, host, slots, device space, host-side
guards, the guest's own ceiling, the node's budget) to one target in turn and records
each clamp with its cause, and the rules above it compute the block size, boot memory and
demand it shares; split, the parts would hand each other the half-made plan. What has a
life of its own is out already: the guest's own ceiling arithmetic
(:mod:`kata_mem.core.guestmem`), shrink safety (:mod:`kata_mem.core.safety`), outcomes
(:mod:`kata_mem.core.outcomes`) and pod resizes (:mod:`kata_mem.core.podresize`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Callable, Optional, TypeVar, Union

from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.golang import FLOAT32_OVERFLOW, round_float32
from kata_mem.core.guestmem import ceiling_at, formula, guest_policy
from kata_mem.core.model import (
    ARCHES,
    DIMM_PREFIX,
    KATA_VIRTIO_MEM_ID,
    MEMDEV_PREFIX,
    CgroupLevel,
    Clamp,
    Container,
    Demand,
    Guards,
    GuestCeiling,
    GuestPolicy,
    HostCgroup,
    HostFacts,
    MaxRaise,
    Mechanism,
    MemoryCause,
    MemoryDevice,
    MemoryPlan,
    Note,
    NoteCode,
    Plan,
    PodResources,
    SizingConfig,
    Step,
    VcpuBase,
    VcpuCause,
    VcpuPlan,
    VmState,
    Workload,
    WorkloadSource,
)
from kata_mem.core.units import (
    GiB,
    MiB,
    align_down,
    align_up,
    fmt_bytes,
    fmt_requested,
    per_gib_ceil,
    to_mib_floor,
)

#: Largest ACPI hot-add relative to the current guest memory (Kata's
#: ``acpiMemoryHotplugFactor``): the guest needs ~64 B of memmap per 4 KiB page added.
ACPI_HOTPLUG_FACTOR = 48
#: The size of the virtio-mem device Kata creates is whole multiples of this
#: (qemu.go ``setupVirtioMem``: ``(default_maxmemory - default_memory) >> 2 << 2`` MiB).
VIRTIO_MEM_ALIGN = 4 * MiB
#: The Go runtime's fixed reserve added to QEMU ``maxmem`` on amd64/arm64 (qemu.go
#: ``genericMemoryTopology``: "image NVDIMM device needs memory space 1024MB");
#: runtime-rs adds none (:func:`qemu_maxmem`).
QEMU_MAXMEM_RESERVE = 1024 * MiB
#: Per-architecture vCPU caps (Kata ``govmm`` ``vmm_*.go``); arm64 assumes GICv3.
ARCH_MAX_VCPUS = {"amd64": 240, "arm64": 123, "ppc64le": 128, "s390x": 248, "riscv64": 512}
assert tuple(ARCH_MAX_VCPUS) == ARCHES
#: QEMU pseries (ppc64le) plugs memory in 256 MiB LMBs (``SPAPR_MEMORY_BLOCK_SIZE``):
#: DIMMs must be whole multiples, which the Go runtime gets from the guest's block size.
PPC64_MEMORY_BLOCK = 256 * MiB

_ClampFn = Callable[[MemoryCause, int, str], None]
T = TypeVar("T", int, Fraction)
#: What a guard's bound is called when the alignment stops below it.
GUARD_NAMES: dict[MemoryCause, str] = {
    "host_cgroup": "the host cgroup's room",
    "host_cgroup_unseen": "what the VM has (its host cgroup unseen)",
    "node_budget": "the node budget's room",
}


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


#: No host-side guard, no workload (frozen: one of each is shared).
_NO_GUARDS = Guards()
_NO_DEMAND = Demand()
#: No CPU, and one (Fractions are immutable: each is shared).
_ZERO, _ONE = Fraction(0), Fraction(1)


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


def effective_host_memory(host: HostFacts) -> tuple[int, MemoryCause]:
    """Host memory and the cause name to report when it binds.

    MemTotal as Kata reads it; lowered by a configured memory cgroup limit (beyond Kata).
    """
    if host.cgroup_memory_limit is not None and host.cgroup_memory_limit < host.memory:
        return host.cgroup_memory_limit, "host_cgroup"
    return host.memory, "host_memtotal"


def max_memory(cfg: SizingConfig, host: HostFacts) -> tuple[int, MemoryCause]:
    """The memory ceiling and its cause.

    Kata ``defaultMaxMemSz``: ``default_maxmemory`` when non-zero and not above
    the host, else the host; with hugepages, also no more than the pool holds.
    """
    return _ceiling(cfg, host, cfg.default_maxmemory)


def host_ceiling(cfg: SizingConfig, host: HostFacts) -> tuple[int, MemoryCause]:
    """What the host can give a VM at all, whatever ``default_maxmemory`` says:
    its memory, and with hugepages no more than the pool. No plan goes above it."""
    return _ceiling(cfg, host, 0)


def _ceiling(cfg: SizingConfig, host: HostFacts, configured: int) -> tuple[int, MemoryCause]:
    host_mem, host_cause = effective_host_memory(host)
    if configured == 0 or configured > host_mem:
        ceiling, cause = host_mem, host_cause
    else:
        ceiling, cause = configured, "default_maxmemory"
    if cfg.enable_hugepages:
        # Whole MiB, as host memory is (a pool of 64 KiB pages need not be).
        pool = align_down(host.hugepages_total * host.hugepage_size, MiB)
        if pool < ceiling:
            ceiling, cause = pool, "hugepages"
    return ceiling, cause


def boot_memory(cfg: SizingConfig, host: HostFacts, need: Optional[Demand] = None) -> int:
    """The boot memory of a VM started from ``cfg`` on ``host`` for a workload of ``need``
    (None: none): ``default_memory``, never more than the host's memory (runtime-rs
    ``MemoryInfo::adjust_config`` lowers it to the host; the Go runtime asks QEMU for it
    unchanged, which fails to start above ``maxmem`` and overcommits the host below it). A
    hugepage pool too small to boot from is reported, not planned around.

    With ``static_sandbox_resource_mgmt`` Kata boots the VM at its static size for the
    workload (:func:`static_size`), never above what the host can give (the memory, and
    with hugepages the pool), as kata-mem plans every size."""
    static = static_size(cfg, need or _NO_DEMAND)
    if static is not None:
        return min(static, host_ceiling(cfg, host)[0])
    return min(cfg.default_memory, effective_host_memory(host)[0])


def mechanism(cfg: SizingConfig) -> Mechanism:
    """How the VM's memory is resized: DIMMs, or its virtio-mem device
    (``enable_virtio_mem``). A VM Kata sizes at boot (``static_sandbox_resource_mgmt``)
    has the same hotplug region on x86_64 QEMU (runtime-rs ``-m SIZE,slots=N,maxmem=M``,
    cmdline_generator.rs ``Memory::new``), and kata-mem resizes it through it."""
    return "virtio-mem" if cfg.enable_virtio_mem else "pc-dimm"


def block_size(cfg: SizingConfig, host: HostFacts, vm: Optional[VmState] = None) -> int:
    """Hotplug granularity: the guest memory block for DIMMs, the device's
    ``block-size`` for virtio-mem (observed when known); with hugepages, also a multiple
    of the hugepage size."""
    mech = mechanism(cfg)
    if mech == "virtio-mem":
        dev = vm.virtio_mem if vm is not None else None
        block = dev.block if dev is not None and dev.block > 0 else cfg.settings.virtio_mem_block
    else:
        block = cfg.settings.dimm_block
        if host.arch == "ppc64le":
            block = math.lcm(block, PPC64_MEMORY_BLOCK)
    if cfg.enable_hugepages and host.hugepage_size > 0:
        block = math.lcm(block, host.hugepage_size)
    return block


def block_origin(mech: Mechanism, vm: VmState, target: int) -> int:
    """Where the whole blocks a plan adds are counted from: the guest memory it cannot
    change in blocks. A new DIMM comes on top of everything the VM has, another tool's
    odd-sized DIMM or a virtio-mem device's plugged memory included; a virtio-mem
    device's size on top of all the memory outside it. Only a VM that is not to grow by
    DIMMs counts from the boot memory. With only whole blocks plugged
    (what kata-mem plugs), each of these is the boot memory plus whole blocks."""
    if mech == "pc-dimm" and target > vm.total:
        return vm.total
    dev = vm.virtio_mem
    if mech == "virtio-mem" and dev is not None:
        return vm.total - dev.size
    return vm.base


def crooked_regions(vm: VmState, block: int) -> list[str]:
    """The regions of the device-memory area that do not start and end on a ``block``
    boundary. QEMU places a new DIMM in the first room it finds, aligned only to its
    backend's pages (``memory_device_get_free_addr``, hw/mem/memory-device.c), so after
    such a region it starts off a block, and Linux refuses it ("unaligned hotplug range",
    ``check_hotplug_memory_range``, mm/memory_hotplug.c) while ACPI still reports the
    insert as a success (``_OST`` status 0: measured on the test guest). The area itself
    starts on a GiB boundary on every machine Kata uses (x86 ``pc_memory_init``, arm
    ``virt``, ppc64 ``spapr``), so with no crooked region a DIMM of whole blocks lands
    on a block."""
    return [
        f"{what} at {start:#x} ({fmt_bytes(size)})"
        for what, start, size in vm.regions()
        if start % block or (start + size) % block
    ]


def dimm_slots(cfg: SizingConfig, host: HostFacts) -> int:
    """The DIMM slots a VM booted from ``cfg`` on ``host`` has. The Go runtime hands
    ``memory_slots`` to QEMU as a uint8 (qemu.go ``memoryTopology``, govmm
    ``Memory.Slots``), so 300 is 44, and 256 is 0, for which govmm writes no ``slots=``
    (``appendMemory``) and QEMU refuses every DIMM. runtime-rs passes a u32
    (src/runtime-rs/crates/hypervisor/src/qemu/cmdline_generator.rs, ``Memory.num_slots``),
    and other hypervisors take it as it is.
    s390x has no DIMMs at all: Kata refuses memory hotplug there without virtio-mem
    (qemu.go ``hotplugMemory``, ``s390xVirtioMemRequiredErr``)."""
    if host.arch == "s390x" and not cfg.enable_virtio_mem:
        return 0
    uint8 = cfg.hypervisor == "qemu" and cfg.runtime == "go"
    return cfg.memory_slots & 0xFF if uint8 else cfg.memory_slots


def qemu_maxmem(cfg: SizingConfig, ceiling: int, base: int) -> int:
    """QEMU's ``maxmem`` for a VM of ``cfg`` booted with ``base`` under the memory maximum
    ``ceiling`` (``default_maxmemory``, the host's memory when 0): what its DIMMs and
    virtio-mem device share is ``maxmem`` less the boot memory.

    The Go runtime asks for ``default_maxmemory`` + ``memory_offset`` + 1024 MiB
    (src/runtime/virtcontainers/qemu.go ``memoryTopology``, ``genericMemoryTopology``);
    runtime-rs for ``default_maxmemory`` alone (src/runtime-rs/crates/hypervisor/src/qemu/
    cmdline_generator.rs ``Memory::new``), which ``MemoryInfo::adjust_config`` makes the
    host's memory when 0 and static sizing raises to the boot size
    (cpu_mem/initial_size.rs ``InitialSizeManager::setup_config``)."""
    if cfg.runtime == "runtime-rs":
        return max(ceiling, base)
    return ceiling + cfg.memory_offset + QEMU_MAXMEM_RESERVE


def assumed_vm(
    cfg: SizingConfig,
    host: HostFacts,
    current: Optional[int] = None,
    workload: Optional[Workload] = None,
) -> VmState:
    """The VM a preview assumes: booted as Kata boots it for ``workload`` (``-m
    default,slots,maxmem``, the boot memory never above the host: :func:`boot_memory`;
    with ``static_sandbox_resource_mgmt``, at the workload's static size), with ``current
    - boot`` already plugged as one DIMM or in the virtio-mem device.
    """
    need = None
    if workload is not None and cfg.static_sandbox_resource_mgmt:
        need = demand(cfg, workload)[0]
    return _assumed_vm(cfg, host, current, need)


def _assumed_vm(
    cfg: SizingConfig, host: HostFacts, current: Optional[int], need: Optional[Demand]
) -> VmState:
    ceiling, _ = max_memory(cfg, host)
    base = boot_memory(cfg, host, need)
    space = max(qemu_maxmem(cfg, ceiling, base) - base, 0)
    plugged = max((current or base) - base, 0)
    devices: tuple[MemoryDevice, ...] = ()
    mech = mechanism(cfg)
    if mech == "virtio-mem":
        block = block_size(cfg, host)
        # Kata sizes the device in whole 4 MiB (qemu.go setupVirtioMem: "backend memory
        # size must be multiple of 4Mib"), then QEMU takes whole blocks of it.
        room = align_down(ceiling - base, VIRTIO_MEM_ALIGN) if ceiling > base else 0
        devices = (
            MemoryDevice(
                id=KATA_VIRTIO_MEM_ID,
                kind="virtio-mem",
                size=plugged,
                requested=plugged,
                max_size=align_down(room, block),
                block=block,
            ),
        )
    elif mech == "pc-dimm" and plugged:
        # Assumed plugged by kata-mem (as a preview of its own earlier apply).
        dimm = MemoryDevice(
            id=f"{DIMM_PREFIX}0",
            kind="dimm",
            size=plugged,
            slot=0,
            memdev=f"{MEMDEV_PREFIX}0",
            ours=True,
        )
        devices = (dimm,)
    return VmState(base=base, devices=devices, slots=dimm_slots(cfg, host), device_space=space)


def boot_guest_ceiling(cfg: SizingConfig, host: HostFacts) -> Optional[GuestCeiling]:
    """The guest's own ceiling for a VM as booted from ``cfg``, where it bounds the target
    (movable onlining, no memmap_on_memory counted): how far the boot memory can describe
    a grow (:mod:`kata_mem.core.guestmem`); None where it does not."""
    mech = mechanism(cfg)
    policy = guest_policy(cfg.kernel_params, cfg.settings, mech)
    if policy.memmap_on_memory or policy.onlining != "movable":
        return None
    base = boot_memory(cfg, host)
    return ceiling_at(policy, cfg.settings, host.arch, base, base)


def guest_ceiling_problem(cfg: SizingConfig, host: HostFacts) -> Optional[str]:
    """Why ``default_maxmemory`` (or, when it is 0, the host) promises more than the boot
    memory can describe (``config check``'s warning); None when it does not."""
    guest = boot_guest_ceiling(cfg, host)
    ceiling, cause = max_memory(cfg, host)
    if guest is None or ceiling <= guest.limit:
        return None
    what = (
        f"default_maxmemory {fmt_bytes(ceiling)}"
        if cause == "default_maxmemory"
        else f"the host's {fmt_bytes(ceiling)} (default_maxmemory 0)"
    )
    return (
        f"{what} is more than default_memory {fmt_bytes(guest.kernel_memory)} can describe: "
        f"{formula(guest)}; grows stop there (clamp guest_memmap). Raise default_memory, "
        "online hot-added memory to a kernel zone (memhp_default_state=online_kernel in "
        'kernel_params, or [kata_mem] guest_onlining = "kernel"), or use memmap_on_memory '
        "(pc-dimm, [kata_mem] guest_memmap_on_memory)"
    )


def current_problem(
    cfg: SizingConfig, host: HostFacts, current: int, workload: Optional[Workload] = None
) -> Optional[str]:
    """Why a VM of this configuration, booted for ``workload``, cannot have ``current``
    bytes of guest memory (``None`` when it can): below its boot memory, above the memory
    maximum (so above the host), or with a plugged amount that is not whole blocks of the
    mechanism (a DIMM or virtio-mem size the guest cannot have)."""
    base = assumed_vm(cfg, host, None, workload).base
    ceiling, cause = max_memory(cfg, host)
    ceiling = max(ceiling, base)
    block = block_size(cfg, host)
    if current < base:
        booted = (
            "the size Kata boots this workload with: static_sandbox_resource_mgmt"
            if cfg.static_sandbox_resource_mgmt
            else "default_memory"
        )
        return f"below the boot memory {fmt_bytes(base)} ({booted}); expected the guest's total"
    if current > ceiling:
        return (
            f"above the memory maximum {fmt_bytes(ceiling)} ({cause}); a guest never has more "
            "than its maximum"
        )
    plugged = current - base
    if plugged % block:
        return (
            f"{fmt_bytes(plugged)} above the boot memory {fmt_bytes(base)} is not a whole number "
            f"of {fmt_bytes(block)} blocks ({mechanism(cfg)}); expected the boot memory plus "
            f"whole blocks, e.g. {fmt_bytes(base + align_down(plugged, block))}"
        )
    return None


def plan(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    vm: Optional[VmState] = None,
    guards: Optional[Guards] = None,
    guest_available: Optional[int] = None,
) -> Plan:
    """Plan the sandbox's memory and vCPUs.

    ``vm`` is the observed VM (``None``: a freshly booted VM as Kata boots it for
    ``workload``);
    ``guards`` what the host side says (its cgroup, the node's total), read just
    before; ``guest_available`` the guest's MemAvailable from a fresh reading (``apply``),
    which lowers the guest's own ceiling (:mod:`kata_mem.core.guestmem`). Never raises
    for large limits: the target is clamped and every clamp is recorded with its cause.
    """
    need, warnings = demand(cfg, workload)  # once: memory and vCPUs size the same workload
    vm = vm if vm is not None else _assumed_vm(cfg, host, None, need)
    mem_plan, mem_notes = _plan_memory(
        cfg, host, workload, need, vm, guards or _NO_GUARDS, guest_available
    )
    vcpus, vcpu_notes = _plan_vcpus(cfg, host, need)
    warnings += mem_notes
    warnings += vcpu_notes
    warnings += [Note("vcpu_clamp", c.detail) for c in vcpus.clamps]
    if workload.sizing is not None:
        warnings = [*workload.sizing.notes, *warnings]
    return Plan(memory=mem_plan, vcpus=vcpus, notes=tuple(warnings))


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


def sized(
    cfg: SizingConfig, host: HostFacts, workload: Workload, need: Demand
) -> tuple[int, list[Note]]:
    """The guest memory the sizing model asks for (docs, "Sizing models").

    ``kata``: ``default_memory`` + limits (Kata). ``pod-overhead``: the pod overhead
    + limits, what the scheduler reserved (kata-containers PR #12735). ``pod-limit``:
    the limits alone, the overhead paying for the host side (microsoft/kata-containers
    PR #281); without limits, ``default_memory`` as Kata. The boot memory is a floor
    in every model: a VM never has less than it booted with.

    With ``static_sandbox_resource_mgmt``, Kata's static size (:func:`static_size`),
    whatever the model: Kata boots the VM at it, and a model that sized it otherwise would
    resize every sandbox away from its boot size.
    """
    work_mem = need.total_memory
    notes: list[Note] = []
    static = static_size(cfg, need)
    if static is not None:
        if cfg.settings.sizing != "kata":
            notes.append(
                Note(
                    "sizing",
                    f"sizing {cfg.settings.sizing} does not apply with "
                    "static_sandbox_resource_mgmt: the VM is sized as Kata boots it",
                )
            )
        return static, notes
    model = cfg.settings.sizing
    overhead, _ = pod_overhead(cfg, workload)
    if model == "pod-overhead" and overhead is None:
        notes.append(
            Note(
                "sizing",
                "sizing pod-overhead: no pod overhead known (Pod spec.overhead.memory, the "
                "kata-mem.io/pod-overhead-memory annotation, [kata_mem] pod_overhead_mib): "
                "sized as kata (default_memory + limits)",
            )
        )
        model = "kata"
    if model == "kata":
        wanted = cfg.default_memory + work_mem
    elif model == "pod-overhead":
        assert overhead is not None
        wanted = overhead + work_mem
    else:
        wanted = work_mem if work_mem > 0 else cfg.default_memory
    return max(wanted, boot_memory(cfg, host)), notes


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


def vmm_overhead(cfg: SizingConfig, guest_total: int) -> int:
    """What the VMM uses on the host beyond guest RAM, by the configured model:
    a fixed part plus a part per GiB of guest memory (host page tables grow with it)."""
    s = cfg.settings
    return s.vmm_overhead + per_gib_ceil(s.vmm_overhead_per_gib, guest_total)


def cgroup_room(
    cfg: SizingConfig, cgroup: HostCgroup, current: int
) -> Optional[tuple[int, CgroupLevel]]:
    """The largest guest total the cgroup's limits allow, and the limit that binds
    (``None`` without a limit).

    At every limited level ``total + max(vmm_overhead(total), other) + margin <=
    limit``, where ``other`` is what is charged there beyond the guest memory the
    VM has now (``usage - current``): the cgroup's actual charge, when it says more
    than the overhead model (a virtiofsd, other pods under a parent), wins.
    """
    best: Optional[tuple[int, CgroupLevel]] = None
    for level in cgroup.levels:
        room = level_room(cfg, level, current)
        if best is None or room < best[0]:
            best = (room, level)
    return best


def level_room(cfg: SizingConfig, level: CgroupLevel, current: int) -> int:
    """The largest guest total one limited cgroup level allows (:func:`cgroup_room`)."""
    s = cfg.settings
    usable = level.limit - s.host_cgroup_margin
    by_model = (usable - s.vmm_overhead) * GiB // (GiB + s.vmm_overhead_per_gib)
    other = max((level.usage or 0) - current, 0)
    # Whole MiB (every block is): readable clamps, and no plan changes.
    return align_down(max(min(by_model, usable - other), 0), MiB)


def _plan_memory(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    need: Demand,
    vm: VmState,
    guards: Guards,
    guest_available: Optional[int] = None,
) -> tuple[MemoryPlan, list[Note]]:
    mech = mechanism(cfg)
    host_mem, host_cause = effective_host_memory(host)
    ceiling, ceiling_cause = max_memory(cfg, host)
    # What set the maximum, kept for the plan as it was before any raise below.
    limit, limit_cause = ceiling, ceiling_cause
    raised_to: Optional[MaxRaise] = None
    block = block_size(cfg, host, vm)
    base = vm.base
    now = vm.total  # the VM's guest memory, read once (a sum over its devices)
    requested, warnings = sized(cfg, host, workload, need)
    warnings.extend(guards.notes)
    if guards.unseen is not None:
        warnings.append(Note("host_cgroup_unseen", unseen_text(guards)))
    elif guards.off:
        warnings.append(
            Note(
                "host_cgroup",
                'host cgroup guard off (host_cgroup_guard = "off"): growth is not checked '
                "against the VMM's cgroup",
            )
        )
    clamps: list[Clamp] = []

    def clamp(cause: MemoryCause, limit: int, detail: str) -> None:
        clamps.append(Clamp(cause, limit, detail))

    def note(code: NoteCode, text: str) -> None:
        warnings.append(Note(code, text))

    if cfg.default_memory > host_mem:
        note(
            "boot_memory",
            f"default_memory {fmt_bytes(cfg.default_memory)} is above the host's memory "
            f"{fmt_bytes(host_mem)}: a VM boots with at most {fmt_bytes(host_mem)}, as "
            "runtime-rs lowers it (the Go runtime would ask QEMU for the full size)",
        )
    slots = dimm_slots(cfg, host)
    if mech == "pc-dimm" and host.arch == "s390x":
        note(
            "memory_slots",
            "s390x has no DIMMs: Kata hotplugs memory there only with enable_virtio_mem "
            "(qemu.go hotplugMemory: s390xVirtioMemRequiredErr), so the VM keeps its boot "
            "memory",
        )
    elif mech == "pc-dimm" and slots != cfg.memory_slots:
        note(
            "memory_slots",
            f"memory_slots {cfg.memory_slots} gives QEMU {slots} DIMM slots: the Go runtime "
            "hands it to QEMU as a uint8 (qemu.go memoryTopology)"
            + (", and with none QEMU refuses every DIMM" if slots == 0 else ""),
        )
    top, top_cause = host_ceiling(cfg, host)
    static = cfg.static_sandbox_resource_mgmt
    if static:
        note(
            "static_sizing",
            f"static_sandbox_resource_mgmt: Kata sized the VM at boot ({fmt_bytes(base)}) and "
            "never resizes it; kata-mem resizes it to the size Kata boots this workload with, "
            f"through its hotplug region ({mech})",
        )
    wanted = max(align_up(requested, MiB), base) if static else 0
    if wanted > ceiling and ceiling < top:
        # Kata raises default_maxmemory to the boot size (runtime-rs
        # InitialSizeManager::setup_config: default_maxmemory.max(default_memory)), and
        # kata-mem follows runtime-rs, never above the host (the Go runtime boots the full
        # size too, but keeps QEMU's maxmem at default_maxmemory + memory_offset + 1024 MiB,
        # so QEMU refuses to start above that). Raised to the size Kata would boot the
        # workload with now, the maximum is no longer what bounds a resize after boot:
        # QEMU's maxmem, fixed when the VM booted (runtime-rs: the maximum raised to the
        # boot size then; with default_maxmemory 0, Kata's default, the host's memory), is,
        # through the device space it leaves (cause device_space).
        raised = min(wanted, top)  # whole MiB, as Kata's static sizes are
        what = "the boot size" if align_up(requested, MiB) >= base else "the VM's boot memory"
        note(
            "static_sizing",
            f"static_sandbox_resource_mgmt: the maximum is raised from {fmt_bytes(ceiling)} "
            f"({ceiling_cause}) to {what} {fmt_bytes(raised)}, as runtime-rs does",
        )
        ceiling, ceiling_cause, raised_to = raised, top_cause, "boot_size"
    # The maximum the boot memory is above, when the VM keeps its boot memory instead.
    below: Optional[int] = None
    if base > ceiling:
        note(
            "boot_memory",
            f"boot memory {fmt_bytes(base)} is above the memory maximum {fmt_bytes(ceiling)}: "
            "the sandbox keeps its boot memory and nothing is hotplugged",
        )
        below, ceiling, raised_to = ceiling, base, "boot_memory"
        if cfg.default_memory > host_mem and base >= host_mem:
            # The boot memory was lowered to the host's, which then bounds the target:
            # default_maxmemory, below it, is not what the target was clamped to.
            below, ceiling_cause = None, host_cause
    target = requested
    if target > ceiling:
        said = _cause_text(ceiling_cause, requested, ceiling, cfg)
        if below is not None:
            # Clamped by the cause, but to the boot memory: "clamped to 2048 MiB by the
            # hugepage pool" of a pool of 1024 MiB would not add up.
            said = (
                f"requested {fmt_requested(requested)} clamped to the boot memory "
                f"{fmt_bytes(ceiling)}, which is above {_CAUSE_WHY[ceiling_cause]} "
                f"{fmt_bytes(below)}"
            )
        clamp(ceiling_cause, ceiling, said)
        target = ceiling
    # The host-side guards bound growth only: a VM is never shrunk for them here
    # (a shrink has its own safety rules), and what it has stays.
    upper, upper_what = ceiling, "the maximum"
    if target > now:
        for cause, room, detail in _guard_rooms(cfg, vm, guards, target):
            bound = max(room, now)
            if target > room:
                clamp(cause, bound, detail(bound))
                target = bound
            # A target within the room still rounds up to whole blocks: not past the room.
            if bound < upper:
                upper, upper_what = bound, GUARD_NAMES[cause]
    pod = guards.pod_limit
    if pod is not None:
        # The limit the kubelet is about to set bounds the VM whichever way it goes: a
        # shrink to it runs through the safe shrink, never past the boot memory.
        bound = max(level_room(cfg, pod, now), base)
        if target > bound:
            clamp("host_cgroup", bound, _pod_limit_text(cfg, pod, target, bound, base))
            target = bound
        if bound < upper:
            upper, upper_what = bound, "the new pod limit's room"
    guest: Optional[GuestCeiling] = None
    policy = guest_policy(cfg.kernel_params, cfg.settings, mech)
    if target > now and not policy.memmap_on_memory:
        guest = ceiling_at(policy, cfg.settings, host.arch, base, now, guest_available)
        if policy.onlining == "movable":
            # Added memory pays for nothing: the whole grow is described from the boot memory.
            bound = max(guest.limit, now)
            if target > bound:
                clamp("guest_memmap", bound, _guest_text(guest, target, bound))
                target = bound
            if bound < upper:
                upper, upper_what = bound, "the guest's memmap ceiling"

    # A VM never goes below its boot memory: a target below it is kept as the target the
    # plan could not reach (``aligned``), and the VM stays at what it booted with.
    below_base = target < base
    if below_base:
        note(
            "boot_memory",
            f"the target {fmt_requested(target)} is below the VM's boot memory "
            f"{fmt_bytes(base)}: "
            + (
                "Kata sized the VM at boot (static_sandbox_resource_mgmt), and boot memory "
                "cannot be given back"
                if static
                else "boot memory cannot be given back"
            )
            + f"; the VM keeps at least {fmt_bytes(base)}",
        )
    unreached = target
    # Round what is added up to whole blocks, unless that crosses the max. Blocks count
    # from what the plan cannot change in blocks (:func:`block_origin`).
    origin = block_origin(mech, vm, target)
    want = max(target - origin, 0)
    aligned = align_up(want, block)
    if origin + aligned > upper:
        aligned = align_down(want, block)
        if aligned < want:
            clamp(
                "alignment",
                origin + aligned,
                f"rounded down to {fmt_bytes(origin + aligned)}: the next {fmt_bytes(block)} "
                f"block would cross {upper_what} {fmt_bytes(upper)}",
            )
    target = origin + aligned
    aligned_target = unreached if below_base else target

    others = [d.id for d in vm.virtio_mems if vm.virtio_mem is not None and d is not vm.virtio_mem]
    if mech == "virtio-mem" and others:
        note(
            "left_alone",
            f"left alone: virtio-mem {', '.join(others)}: kata-mem resizes only the sandbox's "
            f"{vm.virtio_mem.id if vm.virtio_mem else ''} (Kata's {KATA_VIRTIO_MEM_ID}), and counts "
            "the others' memory as it is",
        )
    steps: tuple[Step, ...] = ()
    current = now
    if target > current:
        cap = None if guest is None else _stage_cap(cfg, host, base, policy, block, now, guest)
        steps, reached = (
            _grow_dimm(vm, target, block, clamp, cap)
            if mech == "pc-dimm"
            else _resize_virtio_mem(cfg, vm, target, block, clamp, cap)
        )
        target = reached
    elif target < current:
        steps, target = (
            _shrink_dimm(vm, target, clamp)
            if mech == "pc-dimm"
            else _resize_virtio_mem(cfg, vm, target, block, clamp)
        )
        if steps:
            note(
                "shrink_planned",
                "shrink planned: each step runs only after the guest-usage safety check",
            )
    node = guards.node
    reserved = (
        None if node is None or node.budget is None else reserved_problem(node.reserved, node.host)
    )
    if reserved is not None:
        note("node", reserved)
    if guards.node is not None and guards.node.available is not None:
        grow = target - now
        if grow > guards.node.available:
            note(
                "node",
                f"the grow of {fmt_bytes(grow)} is more than the host's MemAvailable "
                f"{fmt_bytes(guards.node.available)} now: the guest may touch memory the host "
                "has to reclaim or swap first",
            )
    if guards.cgroup is not None:
        found_room = cgroup_room(cfg, guards.cgroup, now)
        if found_room is not None and now > found_room[0]:
            note(
                "host_cgroup",
                f"the VM ({fmt_bytes(now)}) is already more than its host cgroup "
                f"{found_room[1].path} allows with the VMM overhead ({fmt_bytes(found_room[0])}): the host may "
                "OOM-kill the VMM when the guest uses its memory; shrink it or raise the limit",
            )
    overhead, overhead_origin = pod_overhead(cfg, workload)
    warnings.extend(Note("memory_clamp", c.detail) for c in clamps)
    return (
        MemoryPlan(
            host=host_mem,
            configured_max=cfg.default_maxmemory,
            max=ceiling,
            base=base,
            requested=requested,
            aligned=aligned_target,
            target=target,
            current=current,
            mechanism=mech,
            block=block,
            clamps=tuple(clamps),
            steps=steps,
            sizing=cfg.settings.sizing,
            pod_overhead=overhead,
            pod_overhead_origin=overhead_origin,
            host_cgroup=guards.cgroup,
            host_cgroup_unseen=guards.unseen,
            vmm_overhead=None if guards.cgroup is None else vmm_overhead(cfg, target),
            node=guards.node,
            workload=need,
            guest=guest,
            guest_policy=policy,
            static_sizing=static,
            max_cause=limit_cause,
            max_raised=raised_to,
            max_limit=limit,
        ),
        warnings,
    )


def reserved_problem(reserved: int, host: int) -> Optional[str]:
    """Why the node's budget is 0 when ``node_reserved_mib`` (``reserved``) leaves nothing
    of the host's memory (a plan, ``status --all`` and ``config check`` say it alike);
    ``None`` otherwise."""
    if reserved < host:
        return None
    return (
        f"node_reserved_mib ({fmt_bytes(reserved)}) is not below the host's memory "
        f"({fmt_bytes(host)}): the node budget is 0, so no sandbox can grow; lower "
        "node_reserved_mib"
    )


def _guard_rooms(
    cfg: SizingConfig, vm: VmState, guards: Guards, target: int
) -> list[tuple[MemoryCause, int, Callable[[int], str]]]:
    """The host-side bounds on a grow: the VMM's cgroup, then the node's budget."""
    rooms: list[tuple[MemoryCause, int, Callable[[int], str]]] = []
    cgroup = guards.cgroup
    found = None if cgroup is None else cgroup_room(cfg, cgroup, vm.total)
    if found is not None:
        room, level = found
        s = cfg.settings

        def cgroup_text(limit: int) -> str:
            return (
                f"grow to {fmt_requested(target)} clamped to {fmt_bytes(limit)} by the host cgroup "
                f"{level.path} (limit {fmt_bytes(level.limit)}): guest + VMM overhead ({fmt_bytes(s.vmm_overhead)} + "
                f"{fmt_bytes(s.vmm_overhead_per_gib)}/GiB, or what is charged beyond the guest, "
                f"whichever is more) + margin {fmt_bytes(s.host_cgroup_margin)} must fit its limit"
            )

        rooms.append(("host_cgroup", room, cgroup_text))
    elif guards.unseen is not None and guards.pod_limit is None:
        # Nothing proves a grow fits a cgroup kata-mem cannot see: hold what the VM has
        # (an update-sandbox's new pod limit is a limit known without reading the cgroup,
        # and bounds the VM on its own below).
        def unseen_room(limit: int) -> str:
            return (
                f"grow to {fmt_requested(target)} held at {fmt_bytes(limit)}: the VMM's host "
                "cgroup cannot be seen, so nothing proves the grow fits its limit "
                '(host_cgroup_guard = "off" grows without the guard)'
            )

        rooms.append(("host_cgroup_unseen", vm.total, unseen_room))
    node = guards.node
    if node is not None and node.budget is not None:
        budget = node.budget
        others = node.committed_others or 0
        room = align_down(max(budget - others, 0), MiB)

        def node_text(limit: int) -> str:
            return (
                f"grow to {fmt_requested(target)} clamped to {fmt_bytes(limit)} by the node budget "
                f"{fmt_bytes(budget)}: the other sandboxes hold {fmt_bytes(others)}"
            )

        rooms.append(("node_budget", room, node_text))
    return rooms


def unseen_text(guards: Guards) -> str:
    """What a plan says when the VMM's host cgroup could not be seen."""
    assert guards.unseen is not None
    return f"host cgroup unseen ({guards.unseen.reason}): {guards.unseen.detail}"


def _pod_limit_text(cfg: SizingConfig, pod: CgroupLevel, target: int, bound: int, base: int) -> str:
    s = cfg.settings
    floor = " (the boot memory: the VM goes no lower)" if bound == base else ""
    return (
        f"{fmt_bytes(target)} clamped to {fmt_bytes(bound)}{floor} by the new pod limit "
        f"{fmt_bytes(pod.limit)} of {pod.path} (UpdatePodSandboxResources): guest + VMM "
        f"overhead ({fmt_bytes(s.vmm_overhead)} + {fmt_bytes(s.vmm_overhead_per_gib)}/GiB, or "
        f"what is charged beyond the guest, whichever is more) + margin "
        f"{fmt_bytes(s.host_cgroup_margin)} must fit it"
    )


def _guest_text(guest: GuestCeiling, target: int, bound: int) -> str:
    return (
        f"grow to {fmt_requested(target)} clamped to {fmt_bytes(bound)} by what the guest "
        f"kernel can describe: {formula(guest)}; raise default_memory, or online hot-added "
        "memory to a kernel zone (memhp_default_state=online_kernel in kernel_params, or "
        '[kata_mem] guest_onlining = "kernel"), or use memmap_on_memory (pc-dimm)'
    )


#: The largest step a grow may make from a guest total (None: no limit).
_Cap = Optional[Callable[[int], int]]


def _stage_cap(
    cfg: SizingConfig,
    host: HostFacts,
    base: int,
    policy: GuestPolicy,
    block: int,
    start: int,
    first: GuestCeiling,
) -> _Cap:
    """What one grow step from a total may add: the memory the guest can describe then
    (:func:`~kata_mem.core.guestmem.ceiling_at`), in whole blocks. ``first`` is the ceiling
    at ``start``, with the guest's fresh reading when there is one: it counts for the first
    step only, later ones are estimated (the executor reads the guest again before each).
    None where memmap_on_memory is counted."""
    if policy.memmap_on_memory:
        return None

    def cap(total: int) -> int:
        if total == start:
            return align_down(first.addable, block)
        return align_down(ceiling_at(policy, cfg.settings, host.arch, base, total).addable, block)

    return cap


#: A maximum's cause, in words.
_CAUSE_WHY: dict[MemoryCause, str] = {
    "default_maxmemory": "default_maxmemory",
    "host_memtotal": "the host's MemTotal",
    "host_cgroup": "the host memory cgroup limit",
    "hugepages": "the hugepage pool",
}


def _cause_text(cause: MemoryCause, requested: int, limit: int, cfg: SizingConfig) -> str:
    why = _CAUSE_WHY[cause]
    return f"requested {fmt_requested(requested)} clamped to {fmt_bytes(limit)} by {why}"


_COUNTED = re.compile(rf"(?:{DIMM_PREFIX}|{MEMDEV_PREFIX})([0-9]{{1,9}})")


def _new_ids(vm: VmState) -> Iterator[tuple[str, str]]:
    """Ids for new DIMMs and their backend objects (``kmdimm<N>``, ``kmmem<N>``): a counter
    past the highest in the VM, skipping any id the VM uses, whoever made it."""
    taken = vm.taken_ids
    counted = (_COUNTED.fullmatch(i) for i in taken)
    index = max((int(m.group(1)) for m in counted if m), default=-1) + 1
    while True:
        dimm, memdev = f"{DIMM_PREFIX}{index}", f"{MEMDEV_PREFIX}{index}"
        if dimm not in taken and memdev not in taken:
            yield dimm, (memdev if vm.backend_objects else "")
        index += 1


def _grow_dimm(
    vm: VmState, target: int, block: int, clamp: _ClampFn, cap: _Cap = None
) -> tuple[tuple[Step, ...], int]:
    """One DIMM per step, each at most 48x the current guest memory (Kata #4847), each
    whole blocks placed on a block; none when QEMU would place it off a block
    (:func:`crooked_regions`)."""
    steps: list[Step] = []
    total = vm.total
    crooked = crooked_regions(vm, block)
    if crooked:
        clamp(
            "alignment",
            total,
            f"no DIMM can be plugged: {', '.join(crooked)} does not start and end on a "
            f"{fmt_bytes(block)} block, so QEMU would place the next DIMM off a block, which "
            "the guest refuses (while its ACPI reports success); remove that device, or use "
            "virtio-mem",
        )
        return (), total
    free_slots = vm.slots - len(vm.dimms)
    free_space = None if vm.device_space is None else vm.device_space - vm.space_used
    ids = _new_ids(vm)
    while total < target:
        if free_slots <= 0:
            clamp(
                "slots",
                total,
                f"no free DIMM slot left ({vm.slots} in all): stops at {fmt_bytes(total)}",
            )
            break
        # At least one block, so that even a tiny guest makes progress.
        size = min(target - total, max(align_down(ACPI_HOTPLUG_FACTOR * total, block), block))
        if cap is not None:
            room = cap(total)
            if room <= 0:
                clamp("guest_memmap", total, _stuck_text(total, block))
                break
            size = min(size, room)
        if free_space is not None and size > free_space:
            size = max(align_down(free_space, block), 0)
            clamp(
                "device_space",
                total + size,
                f"QEMU device-memory space ({fmt_bytes(vm.device_space or 0)}) runs out: "
                f"stops at {fmt_bytes(total + size)}",
            )
            if size <= 0:
                break
            target = total + size
        total += size
        dimm, memdev = next(ids)
        steps.append(Step("plug_dimm", dimm, size, size, total, memdev))
        free_slots -= 1
        if free_space is not None:
            free_space -= size
    return tuple(steps), total


def _shrink_dimm(vm: VmState, target: int, clamp: _ClampFn) -> tuple[tuple[Step, ...], int]:
    """Whole DIMMs, newest first, each no larger than what is left to remove.

    Only DIMMs kata-mem's journal proves it plugged (``ours``) and whose unplug is not
    already pending qualify; what cannot be removed in whole DIMMs stays (the target
    ends above the request).
    """
    steps: list[Step] = []
    total = vm.total
    candidates = [d for d in vm.dimms if d.ours and not d.pending_unplug]
    candidates.sort(key=lambda d: (d.slot if d.slot is not None else -1, d.id), reverse=True)
    for dimm in candidates:
        if total - dimm.size >= target:
            total -= dimm.size
            steps.append(Step("unplug_dimm", dimm.id, dimm.size, -dimm.size, total, dimm.memdev))
    if total > target:
        clamp(
            "alignment",
            total,
            f"whole DIMMs only: shrinks to {fmt_bytes(total)} instead of {fmt_bytes(target)}",
        )
    return tuple(steps), total


def _stuck_text(total: int, block: int) -> str:
    return (
        f"the guest cannot describe one more {fmt_bytes(block)} block at {fmt_bytes(total)}: "
        "its kernel-zone memory, less the headroom, holds no more struct pages; stops there"
    )


def _resize_virtio_mem(
    cfg: SizingConfig,
    vm: VmState,
    target: int,
    block: int,
    clamp: _ClampFn,
    cap: _Cap = None,
) -> tuple[tuple[Step, ...], int]:
    """Growth in ``requested-size`` changes, each within what the guest can describe
    then (one change where nothing bounds it); shrink in bounded, block-aligned steps."""
    dev = vm.virtio_mem
    if dev is None:
        found = ", ".join(d.id for d in vm.virtio_mems)
        clamp(
            "device_space",
            vm.total,
            f"the VM has virtio-mem devices {found}, none of them Kata's {KATA_VIRTIO_MEM_ID}: "
            "kata-mem cannot tell which is the sandbox's, and resizes none"
            if found
            else "no virtio-mem device in the VM: nothing can be resized",
        )
        return (), vm.total
    others = vm.plugged - dev.size
    want = target - vm.base - others
    if want > dev.max_size:
        want = align_down(dev.max_size, block)
        clamp(
            "device_space",
            vm.base + others + want,
            f"the virtio-mem device holds at most {fmt_bytes(dev.max_size)}: "
            f"stops at {fmt_bytes(vm.base + others + want)}",
        )
    want = max(want, 0)
    if want >= dev.size:
        grown: list[Step] = []
        size = dev.size
        while size < want:
            new = want
            if cap is not None:
                room = cap(vm.base + others + size)
                if room <= 0:
                    clamp(
                        "guest_memmap",
                        vm.base + others + size,
                        _stuck_text(vm.base + others + size, block),
                    )
                    break
                new = min(want, size + room)
            grown.append(Step("resize_virtio_mem", dev.id, new, new - size, vm.base + others + new))
            size = new
        return tuple(grown), vm.base + others + size
    bound = max(
        align_down(
            max(cfg.settings.shrink_step_min, dev.size * cfg.settings.shrink_step_percent // 100),
            block,
        ),
        block,
    )
    steps: list[Step] = []
    size = dev.size
    while size > want:
        new = max(want, size - bound)
        steps.append(Step("resize_virtio_mem", dev.id, new, new - size, vm.base + others + new))
        size = new
    return tuple(steps), vm.base + others + want


def _float32(cpus: Fraction) -> Fraction:
    """A number of vCPUs as Kata holds it, a float32 (:func:`round_float32`); a sum of two
    is their float32 addition (IEEE 754: the exact sum rounded once). Beyond float32's
    range, where Kata's would be +Inf, it stays as it is: no such workload reaches Kata
    (the kubelet's CFS quota is an int64 of microseconds), and the vCPU maximum clamps it
    either way."""
    return round_float32(cpus) if abs(cpus) < FLOAT32_OVERFLOW else cpus


def _plan_vcpus(cfg: SizingConfig, host: HostFacts, need: Demand) -> tuple[VcpuPlan, list[Note]]:
    """Kata ``defaultMaxVCPUs``/``defaultVCPUs``; target = ceil(default + sum of quota/period).

    ``default`` is the value the VM actually boots with: never above the maximum
    (runtime-rs ``CpuInfo::adjust_config``; the Go runtime would pass QEMU
    ``-smp default,maxcpus=max``, which QEMU refuses).

    In float32, as Kata holds vCPUs (virtcontainers ``NumVCPUsF``, runtime-rs ``f32``):
    ``default_vcpus`` was read as one (:func:`kata_mem.core.golang.toml_float32`,
    ``parse_float32``); the containers' CPUs, summed exactly (:func:`containers_peak`), are
    rounded to one once, as runtime-rs rounds its exact sum (``calc_cpu_resources``:
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
    work_cpu = need.cpu
    arch_cap = ARCH_MAX_VCPUS.get(host.arch)
    if arch_cap is None:
        raise InputError(f"host arch {host.arch!r}: expected one of {', '.join(ARCHES)} (Go names)")
    cause: VcpuCause
    if cfg.default_maxvcpus == 0 or cfg.default_maxvcpus >= host.cpus:
        ceiling, cause = host.cpus, "host_cpus"
    else:
        ceiling, cause = cfg.default_maxvcpus, "default_maxvcpus"
    if arch_cap < ceiling:
        ceiling, cause = arch_cap, "arch"
    default = cfg.default_vcpus
    work_cpu = _float32(work_cpu)
    usable = min(host.cpus, arch_cap)
    # Compared in integers: n/d > k exactly when n > k * d (d > 0), without a Fraction.
    if default.numerator < 0 or default.numerator > usable * default.denominator:
        default = Fraction(usable)
    elif default.numerator == 0:
        default = _ONE
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
