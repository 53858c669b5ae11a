"""The RuntimeClass overhead (``overhead.podFixed``) under which the host-side guard
never clamps a pod (docs, "Deploying on Kubernetes"): pure arithmetic on the
configuration.

The kubelet limits a pod's cgroup to the sum of its containers' memory limits plus
``overhead.podFixed.memory`` (Kubernetes docs, "Pod Overhead"; kubelet
``pkg/kubelet/cm/helpers_linux.go`` ``ResourceConfigForPod``), and with Kata's
``sandbox_cgroup_only`` QEMU is charged there. The guard lets a VM of ``vm`` bytes
into a cgroup limited to ``limit`` when ``vm + vmm_overhead(vm) + margin <= limit``
(:func:`kata_mem.core.plan.guards.cgroup_room`), so a pod of ``limits`` needs
``podFixed >= vm(limits) + vmm_overhead(vm) + margin - limits``. kata-deploy's fixed
160Mi is below that for Kata's own sizing (Kata issues #6129, #12786). The VM a pod
gets is asked of the planner itself (:func:`kata_mem.core.plan.plan`, alignment and
the memory maximum included), so this arithmetic cannot drift from the sizing rules.

The kernel keeps a cgroup's limit in pages, rounding bytes down (mm/page_counter.c
``page_counter_memparse``). That never costs a pod its room: ``podFixed`` is whole MiB,
what a pod needs is whole KiB (the VMM overhead per GiB of whole-MiB VMs), and the pod
that binds has limits one byte past a whole MiB, so rounding up to MiB leaves at least
the byte the page rounding can take (the property tests check the guard with the
limit in pages of 4 KiB and 64 KiB).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.frozen import frozen, replace
from kata_mem.core.model import Arch, Container, HostFacts, SizingConfig, SizingModel, Workload
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import block_size, boot_guest_ceiling, boot_memory, mechanism
from kata_mem.core.plan.guards import vmm_overhead
from kata_mem.core.units import INT64_MAX, MiB, align_down, align_up, fmt_bytes, to_mib_nearest

#: A host that never binds: the node's memory would only lower a VM (and so what its
#: pod needs), and this overhead is for every node the RuntimeClass selects.
_UNBOUNDED_MEMORY = align_down(INT64_MAX // 4, MiB)
_UNBOUNDED_CPUS = 1 << 16


@frozen
class PodFit:
    """One pod: its memory limits, the VM the sizing model gives it, and the smallest
    pod cgroup in which the guard lets that VM be (``needed``).

    ``asked`` is what the guard is asked to admit, in whole MiB: the VM, or, when the
    memory maximum made the planner round the VM down to a block, the size it was
    rounded from (the guard checks the target before the blocks,
    :func:`kata_mem.core.plan.memory.plan_memory`)."""

    limits: int
    vm: int
    asked: int
    vmm_overhead: int
    margin: int

    @property
    def needed(self) -> int:
        return self.asked + self.vmm_overhead + self.margin

    @property
    def pod_fixed(self) -> int:
        """What ``podFixed.memory`` must be for this pod (may be negative: then any)."""
        return self.needed - self.limits


@frozen
class RuntimeClassOverhead:
    """``overhead.podFixed`` for pods with memory limits up to ``max_pod_memory``.

    ``memory`` is whole MiB, rounded up from the pod that needs the most
    (``binding``); ``smallest`` and ``largest`` are the two ends of the range the
    search covers (see :func:`runtime_class_overhead`). ``cpu_millis`` is the CPU the
    VM's vCPUs can use beyond the pod's CPU limits."""

    sizing: SizingModel
    max_pod_memory: int
    max_pod_memory_from: str
    memory: int
    binding: PodFit
    smallest: PodFit
    largest: PodFit
    mechanism: str
    #: Kata sizes the VM at boot (``static_sandbox_resource_mgmt``), kata-mem after it.
    static: bool
    block: int
    boot: int
    maximum: Optional[int]
    vmm_fixed: int
    vmm_per_gib: int
    margin: int
    default_vcpus: Fraction
    cpu_millis: Optional[int]


def _host(arch: Arch) -> HostFacts:
    return HostFacts(memory=_UNBOUNDED_MEMORY, cpus=_UNBOUNDED_CPUS, arch=arch)


def pod_fit(cfg: SizingConfig, arch: Arch, limits: int) -> PodFit:
    """The VM a freshly booted sandbox of ``cfg`` is grown to for a pod whose memory
    limits add up to ``limits`` bytes, as :func:`~kata_mem.core.plan.plan` sizes it,
    with the VMM overhead the guard counts for it."""
    pod = Workload(containers=(Container("pod", memory_limit=limits),))
    memory = plan(cfg, _host(arch), pod).memory
    asked = max(memory.aligned, align_up(min(memory.requested, memory.max), MiB))
    return PodFit(
        limits,
        memory.aligned,
        asked,
        vmm_overhead(cfg, asked),
        cfg.settings.host_cgroup_margin,
    )


def _added(cfg: SizingConfig) -> int:
    """What a VM of ``cfg`` is sized at above its pod's limits: ``default_memory`` with
    ``kata`` sizing and with the Go runtime's static sizing, ``overhead_memory`` with
    runtime-rs's (``plan.workload.static_size``: the model does not apply), nothing with
    ``pod-limit`` sizing."""
    if cfg.static_sandbox_resource_mgmt:
        return (cfg.overhead_memory or 0) if cfg.runtime == "runtime-rs" else cfg.default_memory
    return cfg.default_memory if cfg.settings.sizing == "kata" else 0


def _step_starts(cfg: SizingConfig, arch: Arch, top: int) -> list[int]:
    """The pod limits up to ``top`` where what the guard is asked to admit steps up
    last before each bound: ``top``, the last whole block under the memory maximum and
    the maximum itself (a static VM is sized above its maximum: its pods past it then
    fall under ``top``).

    What a pod needs beyond its limits falls while its limits grow and the VM stays, and
    rises by the VMM overhead's growth when the VM steps up by as much as the limits
    did, so the largest need below a bound is where the VM last stepped up: one byte
    past a whole block above the boot memory, or past a whole MiB where the maximum has
    the planner round down; for a static VM of the Go runtime, at a whole MiB, since it
    floors the workload to whole MiB (pkg/oci/utils.go ``calculateVMResources``). Both
    are taken: a candidate more only costs a plan (the property tests check every MiB
    and a byte either side).
    """
    host = _host(arch)
    base, block = boot_memory(cfg, host), block_size(cfg, host)
    # What the VM is asked to be, as a function of the limits: limits + offset.
    offset = _added(cfg)
    bounds = [top + offset]
    if cfg.default_maxmemory:
        maximum = max(cfg.default_maxmemory, base)
        bounds += [base + align_down(maximum - base, block), maximum]
    guest = boot_guest_ceiling(cfg, host)
    if guest is not None and guest.limit > base:
        # The guest's own ceiling bounds the VM as the maximum does: memory past it
        # cannot be onlined (kata_mem.core.guestmem; docs, Sizing rules, "guest's own ceiling").
        bounds += [base + align_down(guest.limit - base, block), guest.limit]
    found: set[int] = set()
    for bound in bounds:
        for grid in (block, MiB):
            if bound > base:
                past = base + (bound - 1 - base) // grid * grid + 1 - offset
                at = base + (bound - base) // grid * grid - offset
                # And a MiB before: runtime-rs's static sizing rounds to even MiB
                # (convert_memory_to_mb), so its VM steps up at every other MiB.
                found.update(start for start in (past, at, at - MiB) if 1 <= start <= top)
    return sorted(found)


def runtime_class_overhead(
    cfg: SizingConfig,
    arch: Arch,
    max_pod_memory: Optional[int],
    sizing: Optional[SizingModel] = None,
) -> RuntimeClassOverhead:
    """``overhead.podFixed`` for every pod whose memory limits add up to at most
    ``max_pod_memory`` bytes (``None``: what ``default_maxmemory`` lets a VM grow to),
    under ``sizing`` (``None``: the configuration's ``[kata_mem] sizing``).

    Pods with limits are searched from 1 byte up (a pod without a memory limit has no
    pod cgroup limit, so no guard): the smallest pod, the largest, and the limits where
    the VM last steps up below the largest and below the memory maximum
    (:func:`_step_starts`).

    :raises InputError: ``pod-overhead`` sizing (the VM is then as large as the pod
        cgroup, so no overhead is enough), or no size given and none configured.
    :raises ConfigError: ``enable_hugepages`` (guest memory then comes from the
        hugetlb pool, which the memory cgroup does not charge).
    """
    given = "--sizing" if sizing is not None else f"{cfg.path}: [kata_mem] sizing"
    if sizing is not None:
        cfg = replace(cfg, settings=replace(cfg.settings, sizing=sizing))
    model = cfg.settings.sizing
    if model == "pod-overhead" and not cfg.static_sandbox_resource_mgmt:
        raise InputError(
            f"{given} pod-overhead: the VM is sized at the pod overhead + limits, which is "
            "the whole pod cgroup, so no podFixed leaves room for QEMU's own memory (docs, "
            "'Sizing models'); expected --sizing kata or pod-limit"
        )
    if cfg.enable_hugepages:
        raise ConfigError(
            f"{cfg.path}: enable_hugepages = true: guest memory comes from the hugetlb pool, "
            "which the pod's memory cgroup does not charge (Kubernetes sizes it as "
            "hugepages-<size>), so the memory overhead is not computed for it; expected a "
            "configuration without hugepages"
        )
    if max_pod_memory is None:
        if cfg.default_maxmemory == 0:
            raise InputError(
                f"{cfg.path}: default_maxmemory is 0 (the node's memory): give "
                "--max-pod-memory, the largest pod memory limits the RuntimeClass is for"
            )
        max_pod_memory, origin = max(cfg.default_maxmemory - _added(cfg), 1), "default_maxmemory"
    else:
        origin = "--max-pod-memory"
    if max_pod_memory < 1:
        raise InputError(f"--max-pod-memory {max_pod_memory}: expected at least 1 byte")
    smallest = pod_fit(cfg, arch, 1)
    largest = pod_fit(cfg, arch, max_pod_memory)
    fits = [
        smallest,
        largest,
        *(pod_fit(cfg, arch, n) for n in _step_starts(cfg, arch, max_pod_memory)),
    ]
    binding = max(fits, key=lambda f: (f.pod_fixed, -f.limits))
    host = _host(arch)
    return RuntimeClassOverhead(
        sizing=model,
        max_pod_memory=max_pod_memory,
        max_pod_memory_from=origin,
        memory=max(align_up(binding.pod_fixed, MiB), 0),
        binding=binding,
        smallest=smallest,
        largest=largest,
        mechanism=mechanism(cfg),
        static=cfg.static_sandbox_resource_mgmt,
        block=block_size(cfg, host),
        boot=boot_memory(cfg, host),
        maximum=None if cfg.default_maxmemory == 0 else cfg.default_maxmemory,
        vmm_fixed=cfg.settings.vmm_overhead,
        vmm_per_gib=cfg.settings.vmm_overhead_per_gib,
        margin=cfg.settings.host_cgroup_margin,
        default_vcpus=cfg.default_vcpus,
        cpu_millis=cpu_overhead_millis(cfg.default_vcpus),
    )


def cpu_overhead_millis(default_vcpus: Fraction) -> Optional[int]:
    """The CPU (in millicores) that a VM's vCPUs can run beyond its pod's CPU limits.

    Kata boots ``ceil(default_vcpus + limits)`` vCPUs (``calculateSandboxCPUs``, and
    :func:`kata_mem.core.plan.vcpus.plan_vcpus`), and the kubelet gives the pod cgroup a
    CFS quota of the limits + ``podFixed.cpu``. Over limits ``w`` in whole millicores
    (a quantity's resolution), ``1000 * ceil(d + w/1000) - w`` is largest just past a
    whole CPU, where it is ``1000 * d + 999`` for ``d`` in whole millicores, and the
    whole part of ``1000 * d`` + 1000 otherwise: ``ceil(1000 * d + 999)`` either way.
    ``default_vcpus`` 0 boots 1 vCPU (Kata); a negative one the node's CPUs, unknown
    here (``None``: no CPU overhead).
    """
    if default_vcpus < 0:
        return None
    return math.ceil((default_vcpus or Fraction(1)) * 1000 + 999)


def fmt_limits(n: int) -> str:
    """A size off whole MiB by a few bytes (the limits that bind are one byte past a
    block) as a reader sees it: ``8064 MiB + 1 byte``, ``2352 MiB - 1 byte``."""
    whole = to_mib_nearest(n) * MiB
    off = n - whole
    if off == 0:
        return fmt_bytes(n)
    unit = "byte" if abs(off) == 1 else "bytes"
    if whole == 0:
        return f"{n} {unit}"
    return f"{fmt_bytes(whole)} {'+' if off > 0 else '-'} {abs(off)} {unit}"
