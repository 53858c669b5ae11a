"""The VM a configuration boots on a host: the memory maximum and what sets it, the boot
memory, how the VM is resized and in what blocks, its DIMM slots and QEMU's ``maxmem``,
and the VM a preview assumes (:func:`assumed_vm`). Every later stage reads these; none
depends on what a plan decides. Kata sets the same values when it boots a VM (the Go
runtime's src/runtime/virtcontainers/qemu.go ``memoryTopology``; runtime-rs's
``MemoryInfo::adjust_config`` and cpu_mem/initial_size.rs ``InitialSizeManager::setup_config``).
"""

from __future__ import annotations

import math
from typing import Optional

from kata_mem.core.guestmem import ceiling_at, formula, guest_policy
from kata_mem.core.model import (
    DIMM_PREFIX,
    KATA_VIRTIO_MEM_ID,
    MEMDEV_PREFIX,
    Demand,
    GuestCeiling,
    HostFacts,
    Mechanism,
    MemoryCause,
    MemoryDevice,
    SizingConfig,
    VmState,
    Workload,
)
from kata_mem.core.plan.workload import demand, static_size
from kata_mem.core.units import MiB, align_down, fmt_bytes

#: The size of the virtio-mem device Kata creates is whole multiples of this
#: (qemu.go ``setupVirtioMem``: ``(default_maxmemory - default_memory) >> 2 << 2`` MiB).
VIRTIO_MEM_ALIGN = 4 * MiB
#: The Go runtime's fixed reserve added to QEMU ``maxmem`` on amd64/arm64 (qemu.go
#: ``genericMemoryTopology``: "image NVDIMM device needs memory space 1024MB");
#: runtime-rs adds none (:func:`qemu_maxmem`).
QEMU_MAXMEM_RESERVE = 1024 * MiB
#: QEMU pseries (ppc64le) plugs memory in 256 MiB LMBs (``SPAPR_MEMORY_BLOCK_SIZE``):
#: DIMMs must be whole multiples, which the Go runtime gets from the guest's block size.
PPC64_MEMORY_BLOCK = 256 * MiB

#: No workload (frozen: one is shared).
_NO_DEMAND = Demand()


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
    workload (:func:`~kata_mem.core.plan.workload.static_size`), never above what the host
    can give (the memory, and with hugepages the pool), as kata-mem plans every size."""
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
    return booted_vm(cfg, host, current, need)


def booted_vm(
    cfg: SizingConfig, host: HostFacts, current: Optional[int], need: Optional[Demand]
) -> VmState:
    """:func:`assumed_vm` for a workload whose demand is already known (``need``)."""
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
