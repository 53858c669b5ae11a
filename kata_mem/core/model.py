"""The values kata-mem reasons about: frozen dataclasses, sizes in int bytes.

Edges (config, sources, host probe, backends) build these; the pure planner
and safety policy consume them; the renderers turn them into text or JSON.

One module (about 830 lines) because it is the one vocabulary every layer shares: value
types, their checks on construction and small derived properties, no other logic. Split by
topic, almost every part would import the others (a plan holds clamps, steps, guards and
the VM it was made from) and almost every caller would import them all; the values that
belong to one job live with it (:mod:`kata_mem.core.record`, :mod:`kata_mem.core.results`,
:mod:`kata_mem.core.request`, :mod:`kata_mem.core.endpoint`).
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Literal, Optional

from kata_mem.core.errors import InputError
from kata_mem.core.frozen import field, frozen
from kata_mem.core.units import MiB

#: How a VM's memory is resized after boot: DIMMs or its virtio-mem device. A VM Kata sizes
#: at boot (``static_sandbox_resource_mgmt``) is resized through the same hotplug region:
#: static sizing is a sizing rule (:attr:`MemoryPlan.static_sizing`), not a mechanism.
Mechanism = Literal["pc-dimm", "virtio-mem"]
Role = Literal["app", "init", "sidecar"]
State = Literal["running", "created", "stopped"]
DeviceKind = Literal["dimm", "virtio-mem"]
StepAction = Literal["plug_dimm", "unplug_dimm", "resize_virtio_mem", "delete_memdev"]

#: Why the memory target ended below what was requested, in the order the causes apply.
MemoryCause = Literal[
    "default_maxmemory",
    "host_memtotal",
    "host_cgroup",
    "host_cgroup_unseen",
    "hugepages",
    "alignment",
    "slots",
    "device_space",
    "node_budget",
    "guest_memmap",
]
#: What a memory maximum was raised to, above the limit that set it: a static VM's boot
#: size, or a boot memory the VM keeps above it.
MaxRaise = Literal["boot_size", "boot_memory"]
#: What the containers' CPUs are added to (:class:`VcpuPlan`).
VcpuBase = Literal["default_vcpus", "overhead_vcpus"]
#: Why the vCPU target ended below what was requested.
VcpuCause = Literal["default_maxvcpus", "host_cpus", "arch"]
Cause = Literal[MemoryCause, VcpuCause]
#: The architectures Kata builds for, by their Go names (the only names used inside).
Arch = Literal["amd64", "arm64", "ppc64le", "s390x", "riscv64"]
ARCHES: tuple[Arch, ...] = ("amd64", "arm64", "ppc64le", "s390x", "riscv64")
#: ``[kata_mem] host_cgroup_guard``: ``on`` holds a grow while the VMM's cgroup is
#: unseen; ``off`` turns the automatic guard off by name (docs, "Host-side guards").
GuardMode = Literal["on", "off"]

#: How the VM's size is derived from the pod (docs, "Sizing models").
SizingModel = Literal["kata", "pod-overhead", "pod-limit"]
SIZING_MODELS: tuple[SizingModel, ...] = ("kata", "pod-overhead", "pod-limit")
#: Which Kata runtime the configuration is for: the Go runtime (containerd-shim-kata-v2) or
#: runtime-rs; their static sizing differs (docs, "Compared with Kata").
Runtime = Literal["go", "runtime-rs"]
RUNTIMES: tuple[Runtime, ...] = ("go", "runtime-rs")
#: Where the guest onlines hot-added memory: ZONE_MOVABLE, or a kernel zone (ZONE_NORMAL)
#: that can hold the struct pages of the next hot-add (:mod:`kata_mem.core.guestmem`).
Onlining = Literal["movable", "kernel"]
ONLININGS: tuple[Onlining, ...] = ("movable", "kernel")

SANDBOX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


#: What ``kata-mem serve`` keeps at the root of the state directory when it listens
#: there, as it does by default (``/run/kata-mem/kata-mem.sock`` in ``/run/kata-mem``):
#: its socket (made by it or by systemd's kata-mem.socket) and the socket's lock.
#: kata-mem's own entries, neither sandboxes nor someone else's, so no sandbox id either.
#: (Its other entries, the markers, the ledger and temporary files, start with a dot,
#: which no id does.)
SERVICE_ENTRIES = ("kata-mem.sock", "kata-mem.sock.lock")


def check_sandbox_id(sandbox: str) -> str:
    """Sandbox ids name directories, so only a safe alphabet is accepted, and none of the
    names the state directory keeps for kata-mem's own entries: a sandbox by such a name
    would be one no listing, ledger check or reconcile sees, and its directory would
    keep ``serve`` from starting there.

    :raises InputError: for anything else (``..``, slashes, empty, too long, reserved).
    """
    if not SANDBOX_ID.fullmatch(sandbox) or sandbox in (".", ".."):
        raise InputError(
            f"sandbox id {sandbox!r}: expected 1-128 characters of letters, digits, '_', '.', '-' "
            "(starting with a letter or digit)"
        )
    if sandbox in SERVICE_ENTRIES:
        raise InputError(
            f"sandbox id {sandbox!r}: reserved for kata-mem serve's own entries in the state "
            f"directory ({', '.join(SERVICE_ENTRIES)}); choose another id"
        )
    return sandbox


#: Prefixes of the ids kata-mem gives the memory devices and backend objects it creates.
#: A name proves nothing: what is kata-mem's is what its journal records
#: (:class:`OwnedDevice`). The prefixes only make new ids and point out look-alikes.
DIMM_PREFIX = "kmdimm"
MEMDEV_PREFIX = "kmmem"
#: The id of the virtio-mem device Kata boots a sandbox with (Go runtime
#: ``qemu.setupVirtioMem``, src/runtime/virtcontainers/qemu.go: ``ExecMemdevAdd(...,
#: "virtio-mem-pci", "virtiomem0", ...)``): the one kata-mem resizes when a VM has several.
KATA_VIRTIO_MEM_ID = "virtiomem0"


#: What a note is about: the interfaces render each code in their own way (a JSON
#: document's ``warnings``, a plan's text), and code never reads meaning from a note's text.
NoteCode = Literal[
    "memory_clamp",  # the memory target was clamped (a Clamp's detail)
    "vcpu_clamp",  # the vCPU target was clamped
    "shrink_not_allowed",  # a lower target kept where it is: shrinking is off
    "shrink_planned",  # the plan shrinks: each step is checked first
    "cannot_shrink",  # a shrink kept where it is: the guest cannot be relied on to give it
    "cri_annotations",  # CRI sandbox-sizing annotations used, ignored, or unparsable
    "sizing",  # how the sizing model came to its size (a pod overhead unknown...)
    "boot_memory",  # the boot memory above the host or the maximum
    "memory_slots",  # the DIMM slots QEMU gets differ from memory_slots (Kata's uint8)
    "static_sizing",  # static_sandbox_resource_mgmt
    "host_cgroup",  # the VMM's host cgroup: usage unknown, or the VM already above it
    "host_cgroup_unseen",  # the VMM's host cgroup could not be found or read (an Unseen)
    "node",  # the node's total: the budget, MemAvailable
    "vcpus",  # how the vCPU numbers were read
    "force",  # --force skipped the shrink checks
    "reverted",  # a step given back or a requested-size put back
    "reconciled",  # repaired what a previous call left
    "left_alone",  # devices or objects that are not proven kata-mem's or the sandbox's
    "journal",  # the journal could not be read, was rebuilt, is shown as unknown
    "state",  # the sandbox's state directory: removed, kept, absent
]


@frozen
class Note:
    """Something a plan or a call tells its user besides the numbers: a code that says
    what it is about, and the text that says it."""

    code: NoteCode
    text: str


#: Where a setting or a host fact came from.
OriginKind = Literal["file", "default", "probe", "override", "option", "request"]


@frozen
class Origin:
    """Where a value came from: a file's key (``where`` the file, ``key`` the table and
    key, ``value`` as the file spells it), a default, a probe of the host (``where`` says
    how), an override, a command-line option or a request field (``where`` names it).
    ``note`` says what was done with the value (a fallback rule, a rounding)."""

    kind: OriginKind
    where: str = ""
    key: str = ""
    value: str = ""
    note: str = ""

    @property
    def given_by_user(self) -> bool:
        """Given in this call (an option, a request field), not read from a file: an
        unusable value is then bad input (exit 4), not a configuration error (exit 3)."""
        return self.kind in ("option", "request")

    def name(self) -> str:
        """The setting as its errors name it: ``FILE: [table] key``, ``--option`` or
        ``request field``."""
        if self.kind == "file":
            return f"{self.where}: {self.key}"
        if self.kind == "request":
            return f"request {self.where}"
        return self.where or self.kind

    def describe(self) -> str:
        """The origin in words, as ``config check`` and ``host`` show it."""
        if self.kind == "file":
            text = f"{self.where}: {self.key} = {self.value}"
        elif self.kind == "default":
            text = f"default ({self.value})"
        elif self.kind == "override":
            return "override" + (f", {self.note}" if self.note else "")
        else:
            text = self.name()
        return text + (f"; {self.note}" if self.note else "")


@frozen
class Settings:
    """kata-mem's own settings (the ``[kata_mem]`` table); see the documentation for each."""

    dimm_block: int = 128 * MiB
    virtio_mem_block: int = 2 * MiB
    headroom_min: int = 128 * MiB
    headroom_percent: int = 10
    shrink_step_min: int = 256 * MiB
    shrink_step_percent: int = 10
    step_timeout_s: float = 20.0
    usage_max_age_s: float = 5.0
    stats_interval_s: int = 1
    allow_shrink: bool = False
    state_dir: str = "/run/kata-mem"
    host_memory_cgroup: str = ""
    hugepages_path: str = "/dev/hugepages"
    sizing: SizingModel = "kata"
    #: The RuntimeClass overhead when neither the Pod nor the annotations give it.
    pod_overhead: Optional[int] = None
    #: What the VMM (QEMU) uses beyond guest RAM: a fixed part, plus a part per GiB
    #: of guest memory (host page tables and the like grow with the VM).
    vmm_overhead: int = 64 * MiB
    vmm_overhead_per_gib: int = 8 * MiB
    host_cgroup_margin: int = 32 * MiB
    host_cgroup_guard: GuardMode = "on"
    node_reserved: int = 0
    #: ``None``: the node's total is reported, never enforced.
    node_overcommit: Optional[Fraction] = None
    #: The Kata runtime sized for; ``None``: inferred from the configuration.
    runtime: Optional[Runtime] = None
    #: How the guest onlines hot-added memory when Kata's ``kernel_params`` does not say;
    #: ``None``: as Kata's guest kernel and agent do, to a kernel zone
    #: (:func:`kata_mem.core.guestmem.guest_policy`).
    guest_onlining: Optional[Onlining] = None
    #: The guest kernel places a DIMM's struct pages inside it (memmap_on_memory, Linux 6.8+
    #: for DIMMs of several memory blocks): no boot-memory ceiling for pc-dimm.
    guest_memmap_on_memory: bool = False


@frozen
class SizingConfig:
    """The sizing keys of one Kata runtime configuration, after Kata's fallbacks.

    ``sources`` maps every key to where its value came from (a file and key, a
    Kata default, or a fallback rule), for ``kata-mem config check``.
    """

    path: str
    hypervisor: str
    default_memory: int
    default_maxmemory: int
    memory_slots: int
    memory_offset: int
    enable_virtio_mem: bool
    enable_hugepages: bool
    static_sandbox_resource_mgmt: bool
    default_vcpus: Fraction
    default_maxvcpus: int
    settings: Settings = field(default_factory=Settings)
    #: ``enable_annotations``: the patterns of the hypervisor annotations a pod may set.
    enable_annotations: tuple[str, ...] = ()
    #: runtime-rs ``overhead_vcpus`` / ``overhead_memory`` (bytes); ``None`` where the
    #: configuration does not set the key (runtime-rs then reads 0).
    overhead_vcpus: Optional[Fraction] = None
    overhead_memory: Optional[int] = None
    #: The runtime whose rules apply where the two differ (static sizing): ``[kata_mem]
    #: runtime``, else inferred from the configuration (kata_mem.edges.config).
    runtime: Runtime = "go"
    sources: tuple[tuple[str, Origin], ...] = ()
    files: tuple[str, ...] = ()
    #: The hypervisor's ``kernel_params``: the guest kernel's command line, which says how
    #: it onlines hot-added memory (``memhp_default_state``).
    kernel_params: str = ""
    #: ``shared_fs`` as the runtime reads it (unset: the Go runtime's virtio-fs,
    #: runtime-rs's ``none``): with virtio-fs, virtiofsd maps the guest's memory, and
    #: every DIMM's (:func:`kata_mem.core.backing.dimm_backend`).
    shared_fs: str = "virtio-fs"
    #: The Go runtime's ``file_mem_backend`` (Kata before 3.32): "" for none.
    file_mem_backend: str = ""

    def origin(self, key: str) -> Origin:
        """Where the setting ``key`` (``table.key``, e.g. ``kata_mem.state_dir``) came from."""
        return dict(self.sources).get(key, Origin("default"))


@frozen
class HostFacts:
    """What the host offers. ``memory`` is MemTotal floored to whole MiB."""

    memory: int
    cpus: int
    arch: Arch
    hugepage_size: int = 0
    hugepages_total: int = 0
    hugepages_free: int = 0
    cgroup_memory_limit: Optional[int] = None
    cgroup_path: str = ""
    sources: tuple[tuple[str, Origin], ...] = ()


@frozen
class Container:
    """One container's resources as the sandbox sees them.

    ``memory_limit`` <= 0 means no limit (adds nothing, as in Kata). ``cpu`` is
    CFS quota/period; ``cpuset_cpus`` the number of CPUs in its cpuset
    (``linux.resources.cpu.cpus``), which counts only when no container of the
    sandbox has a quota (Kata ``calculateSandboxCPUs``). ``hugepages_limit`` is the
    sum over the page sizes; ``hugepage_limits`` the limit of each page size as
    (page size, bytes) pairs, when the input names the sizes (empty: unknown), since
    Kubernetes bounds each size on its own (:class:`PodResources`).
    """

    name: str
    memory_limit: int = 0
    hugepages_limit: int = 0
    cpu: Fraction = Fraction(0)
    role: Role = "app"
    state: State = "running"
    origin: str = ""
    cpuset_cpus: int = 0
    hugepage_limits: tuple[tuple[int, int], ...] = ()


#: Where a part of the workload came from: the containers' own limits, the pod-level
#: limits (KEP-2837 ``spec.resources``, a request's ``pod_resources``), or the CRI
#: sandbox resources (containerd's ``io.kubernetes.cri.sandbox-*`` and CRI-O's
#: ``PodLinuxResources`` annotations).
WorkloadSource = Literal["containers", "pod_resources", "cri_annotations"]


def unique_containers(containers: tuple[Container, ...]) -> tuple[Container, ...]:
    """``containers``, each once: a container given twice (the same id in a request, the
    same OCI spec twice on a command line) would count its limit twice, so, as a key
    given twice is refused, so is an id.

    :raises InputError: naming the id and both places.
    """
    first: dict[str, str] = {}
    for c in containers:
        if c.name in first:
            raise InputError(
                f"{c.origin}: container id {json.dumps(c.name)[:80]} is also that of "
                f"{first[c.name]}; expected each container once"
            )
        first[c.name] = c.origin
    return containers


@frozen
class PodResources:
    """A pod's pod-level limits (KEP-2837, ``spec.resources.limits``): memory and
    hugepages in bytes (hugepages summed over the page sizes), CPUs as quota/period;
    ``None`` where the pod sets none. ``hugepage_limits`` is the limit of each page
    size as (page size, bytes) pairs when the input names the sizes (empty: unknown):
    the kubelet limits each size on its own (pkg/kubelet/cm/helpers_linux.go
    ``HugePageLimits``), so one size's limit never bounds another's. ``origin`` names
    the input."""

    memory: Optional[int] = None
    cpu: Optional[Fraction] = None
    hugepages: Optional[int] = None
    origin: str = ""
    hugepage_limits: tuple[tuple[int, int], ...] = ()


@frozen
class Demand:
    """What the sandbox's workload needs, each part with where it came from
    (:func:`kata_mem.core.planner.demand`): memory and hugepages in bytes, CPUs.
    ``pod_origin`` names the pod-level input that was read ("" for none)."""

    memory: int = 0
    hugepages: int = 0
    cpu: Fraction = Fraction(0)
    memory_from: WorkloadSource = "containers"
    hugepages_from: WorkloadSource = "containers"
    cpu_from: WorkloadSource = "containers"
    pod_origin: str = ""

    @property
    def total_memory(self) -> int:
        return self.memory + self.hugepages


@frozen
class SandboxSizing:
    """Pod-level sizing from CRI annotations (``io.kubernetes.cri.sandbox-*``), or from
    the pod's new resources of a CRI ``UpdatePodSandboxResources``; ``source`` says which
    in notes, ``origin`` where it was read.

    ``notes`` name annotations that did not parse and were read as absent (as Kata does).
    """

    memory: int
    cpu: Fraction
    origin: str = ""
    notes: tuple[Note, ...] = ()
    source: str = "CRI annotations"


@frozen
class Workload:
    """What the sandbox runs: its containers, CRI pod sizing when given, the pod's
    RuntimeClass overhead when the Pod or its annotations give it (``overhead_origin``
    says which), its pod-level limits (``pod``), and Kata's per-pod hypervisor
    annotations (``io.katacontainers.config.hypervisor.*``) as given, which only the
    configuration's ``enable_annotations`` can make count
    (:func:`kata_mem.core.annotations.sandbox_config`); ``hypervisor_origin`` names where
    they were read."""

    containers: tuple[Container, ...] = ()
    sizing: Optional[SandboxSizing] = None
    overhead: Optional[int] = None
    overhead_origin: str = ""
    pod: Optional[PodResources] = None
    hypervisor: tuple[tuple[str, str], ...] = ()
    hypervisor_origin: str = ""


@frozen
class CgroupLevel:
    """A memory cgroup with a limit, on the way from the VMM's cgroup to the root.

    ``usage`` is what is charged there (``None`` when unreadable). A libvirt
    ``<memtune><hard_limit>`` is a level too (libvirt applies it to QEMU's cgroup).
    """

    path: str
    limit: int
    usage: Optional[int] = None


@frozen
class HostCgroup:
    """The VMM's host memory cgroup: where it is, what is charged, and every limit
    along the path to the root (innermost first). ``origin`` says how it was found
    (``SO_PEERCRED`` pid, libvirt, ``--host-cgroup``, ``host.cgroup``)."""

    path: str
    version: int
    usage: Optional[int]
    levels: tuple[CgroupLevel, ...] = ()
    origin: str = ""
    #: QEMU's charge after the steps ran (``apply`` only).
    usage_after: Optional[int] = None
    #: The usage files that could not be read (their usage is ``None``), each with why.
    unread_usage: tuple[str, ...] = ()

    @property
    def limit(self) -> Optional[int]:
        """The effective limit: the smallest along the path; ``None`` for none."""
        return min((lvl.limit for lvl in self.levels), default=None)


@frozen
class NodeView:
    """The node's memory as the budget sees it: the sandboxes' commitments besides
    this one (each its largest of observed and target; ``None`` when there is no
    budget to hold them against, so they were not read), and the budget if set."""

    host: int
    reserved: int
    budget: Optional[int]
    committed_others: Optional[int]
    available: Optional[int] = None


#: Why the host-side guard could not see the VMM's memory cgroup: the backend could not
#: tell QEMU's pid; no cgroup filesystem mounted here reaches QEMU's cgroup (a cgroup
#: namespace without the host's tree); its files could not be read or trusted.
UnseenReason = Literal["vmm_pid_unknown", "not_reachable", "unreadable"]
UNSEEN_REASONS: tuple[UnseenReason, ...] = ("vmm_pid_unknown", "not_reachable", "unreadable")


@frozen
class Unseen:
    """The VMM's memory cgroup could not be seen: why (``reason``), in words naming the
    files (``detail``). Never read as "no limit": a QEMU that runs in no limited cgroup
    is a :class:`HostCgroup` without levels."""

    reason: UnseenReason
    detail: str


@frozen
class Guards:
    """What the host side says about one sandbox, read at the edge just before
    planning: its cgroup (or why it could not be seen) and the node's total."""

    cgroup: Optional[HostCgroup] = None
    #: Set when the VMM's cgroup was looked for and could not be seen.
    unseen: Optional[Unseen] = None
    #: ``host_cgroup_guard = "off"``: the VMM's cgroup was not looked for.
    off: bool = False
    #: What the reading says besides (a usage file that could not be read).
    notes: tuple[Note, ...] = ()
    node: Optional[NodeView] = None
    #: The pod cgroup limit the kubelet is about to set (CRI ``UpdatePodSandboxResources``):
    #: the VM is taken to what it allows, a shrink included (docs, "Kubernetes in-place
    #: resize"); the limit in force stays in ``cgroup`` and bounds a grow.
    pod_limit: Optional[CgroupLevel] = None


@frozen
class OwnedDevice:
    """A memory device kata-mem created, as its journal records it: the only proof that
    a device, or its backend object, is kata-mem's to unplug or delete.

    ``memdev`` is the backend object kata-mem created for it ("" where the hypervisor
    shows none: libvirt makes and removes it with the device). Recorded before the
    plug is sent; ``confirmed`` once the hypervisor accepted it.
    """

    id: str
    memdev: str
    size: int
    kind: Literal["dimm"] = "dimm"
    confirmed: bool = False


@frozen
class BackendObject:
    """A memory backend object that no memory device uses (QEMU's ``/objects``): the
    machine's own RAM, someone else's, or one that a crash or a failed delete left."""

    id: str
    size: int


@frozen
class MemoryDevice:
    """A memory device as the hypervisor reports it.

    ``size`` is what is plugged now (for virtio-mem the device's ``size``, never
    its ``requested-size``). A DIMM whose unplug is pending still counts. ``ours``
    is set from the journal (:func:`kata_mem.core.reports.owned_view`), never by a backend.
    """

    id: str
    kind: DeviceKind
    size: int
    requested: int = 0
    max_size: int = 0
    block: int = 0
    slot: Optional[int] = None
    memdev: str = ""
    hotplugged: bool = True
    pending_unplug: bool = False
    #: A DIMM kata-mem plugged itself, as its journal proves: the only kind it unplugs.
    ours: bool = False
    #: Where its region starts in the device-memory area (None: the hypervisor does not say).
    addr: Optional[int] = None

    @property
    def space(self) -> int:
        """The device-memory space it takes: a virtio-mem device reserves its whole
        region, plugged or not."""
        return self.max_size if self.kind == "virtio-mem" else self.size


@frozen
class VmState:
    """The VM's memory as observed (or, for previews, as assumed).

    ``device_space`` is QEMU's ``maxmem - size`` (None when unknown) less what
    other memory devices (nvdimm, virtio-pmem) take, shared by DIMMs and
    virtio-mem devices (:func:`kata_mem.core.reports.vm_state`).
    """

    base: int
    devices: tuple[MemoryDevice, ...] = ()
    slots: int = 0
    device_space: Optional[int] = None
    #: Memory backend objects that no memory device uses.
    loose: tuple[BackendObject, ...] = ()
    #: The ids of everything else in the VM (its other devices and objects): new ids avoid them.
    other_ids: tuple[str, ...] = ()
    #: Whether a DIMM's backend is an object of its own that kata-mem names when it plugs
    #: and deletes after the unplug (QEMU); libvirt makes and removes it with the device.
    backend_objects: bool = True
    #: Of ``loose``, the objects kata-mem's journal proves it created and whose DIMM is gone
    #: (left by a crash or a late ``DEVICE_DELETED``): safe to delete.
    orphans: tuple[str, ...] = ()
    #: DIMMs and backend objects named like kata-mem's that its journal does not prove
    #: are its own: reported, and left alone.
    unproven: tuple[str, ...] = ()
    #: The VMM process (QEMU), when the backend can tell: its pid, and a limit the
    #: hypervisor manager set on it (libvirt ``<memtune><hard_limit>``).
    vmm_pid: Optional[int] = None
    #: A VMM process runs on this host but the backend could not tell its pid (the QMP
    #: peer in another pid namespace, libvirt's pid file unreadable): its cgroup is then
    #: unseen. False where no host process runs the VM (the fake backend, libvirt's test
    #: driver) or where the pid is known.
    vmm_pid_hidden: bool = False
    vmm_hard_limit: Optional[int] = None
    #: The regions the other memory devices (nvdimm, virtio-pmem) take in the
    #: device-memory area, where known: (what, start, size).
    other_regions: tuple[tuple[str, int, int], ...] = ()

    @property
    def plugged(self) -> int:
        return sum(d.size for d in self.devices)

    @property
    def total(self) -> int:
        return self.base + self.plugged

    @property
    def space_used(self) -> int:
        return sum(d.space for d in self.devices)

    @property
    def dimms(self) -> tuple[MemoryDevice, ...]:
        return tuple(d for d in self.devices if d.kind == "dimm")

    @property
    def virtio_mems(self) -> tuple[MemoryDevice, ...]:
        return tuple(d for d in self.devices if d.kind == "virtio-mem")

    @property
    def virtio_mem(self) -> Optional[MemoryDevice]:
        """The sandbox's virtio-mem device, the only one kata-mem resizes: the VM's only
        one (Kata boots one), or of several the one with Kata's id
        (:data:`KATA_VIRTIO_MEM_ID`); None when none can be told to be the sandbox's,
        and then kata-mem resizes none (another tool's is never grown or shrunk)."""
        found = self.virtio_mems
        if len(found) == 1:
            return found[0]
        return next((d for d in found if d.id == KATA_VIRTIO_MEM_ID), None)

    def device(self, device_id: str) -> Optional[MemoryDevice]:
        return next((d for d in self.devices if d.id == device_id), None)

    def regions(self) -> tuple[tuple[str, int, int], ...]:
        """Every region of the device-memory area whose place is known: (what, start,
        size); a virtio-mem device takes its whole ``max-size``, plugged or not."""
        return (
            *((f"{d.kind} {d.id}", d.addr, d.space) for d in self.devices if d.addr is not None),
            *self.other_regions,
        )

    @property
    def taken_ids(self) -> frozenset[str]:
        """Every id in use in the VM, kata-mem's or not: a new device or object takes none."""
        return frozenset(
            {d.id for d in self.devices}
            | {d.memdev for d in self.devices if d.memdev}
            | {o.id for o in self.loose}
            | set(self.other_ids)
        )


@frozen
class Clamp:
    """One reason the target ended below what was requested."""

    cause: Cause
    limit: int
    detail: str


@frozen
class Step:
    """One hypervisor change. ``size`` is the DIMM size, or the virtio-mem
    ``requested-size`` after the step; ``delta`` the signed change of plugged memory.
    A ``delete_memdev`` step (crash repair) deletes the backend object ``device``.
    ``memdev`` is a DIMM's backend object: the one a plug creates, the one deleted
    after an unplug ("" where the hypervisor shows none)."""

    action: StepAction
    device: str
    size: int
    delta: int
    total_after: int
    memdev: str = ""

    @property
    def shrinks(self) -> bool:
        return self.delta < 0


@frozen
class GuestPolicy:
    """How the guest onlines hot-added memory, and whether kata-mem counts on the memmap
    being placed in it; each with where it was read."""

    onlining: Onlining
    onlining_from: str
    memmap_on_memory: bool
    memmap_from: str
    #: With ``memory_hotplug.online_policy=auto-movable``: the movable memory the guest
    #: allows, in percent of its boot memory (``memory_hotplug.auto_movable_ratio``); a
    #: block past it goes to a kernel zone (:func:`kata_mem.core.guestmem.kernel_zone_dimms`).
    movable_ratio: Optional[int] = None


@frozen
class GuestCeiling:
    """The arithmetic of the ceiling at one point (the VM as it is, or after a step).

    ``kernel_memory`` is the guest memory in kernel zones (the boot memory with movable
    onlining, everything with kernel onlining); ``estimate`` is 3/4 of it less the memmap
    of what is plugged; ``available`` the smaller of that and a fresh reading's
    MemAvailable (``reading``, kept only when it is the smaller); ``room`` what is left above the
    headroom; ``addable`` the memory ``room`` can describe; ``limit`` the total then.
    """

    policy: GuestPolicy
    arch: Arch
    total: int
    kernel_memory: int
    memmap_plugged: int
    estimate: int
    reading: Optional[int]
    available: int
    headroom: int
    room: int
    addable: int
    limit: int


@frozen
class MemoryPlan:
    """The memory side of a plan: every number, the clamps that applied, the steps."""

    host: int
    configured_max: int
    max: int
    base: int
    requested: int
    #: The target after the max and alignment, before slots, device space or whole
    #: DIMMs constrain it: what the guest should have if the mechanism allowed.
    aligned: int
    target: int
    current: int
    mechanism: Mechanism
    block: int
    clamps: tuple[Clamp, ...]
    steps: tuple[Step, ...]
    sizing: SizingModel = "kata"
    #: The RuntimeClass overhead used or reported, and where it came from.
    pod_overhead: Optional[int] = None
    pod_overhead_origin: str = ""
    host_cgroup: Optional[HostCgroup] = None
    #: Why the VMM's cgroup could not be seen, when it could not.
    host_cgroup_unseen: Optional[Unseen] = None
    #: The VMM's own memory at the target (the guard's estimate), when guarded.
    vmm_overhead: Optional[int] = None
    node: Optional[NodeView] = None
    #: The workload the size was made from, and where each part came from.
    workload: Demand = field(default_factory=Demand)
    #: The guest's own ceiling where it applies (a grow, no memmap_on_memory counted).
    guest: Optional[GuestCeiling] = None
    #: How the guest is taken to online hot-added memory, and why, whatever the plan does
    #: (None: not said, as in a plan made by hand).
    guest_policy: Optional[GuestPolicy] = None
    #: Kata sized the VM at boot (``static_sandbox_resource_mgmt``): the target is the size
    #: Kata boots the workload with (planner.static_size), and the boot memory it booted
    #: with cannot be given back.
    static_sizing: bool = False
    #: What set the maximum (planner.max_memory): default_maxmemory, the host or the
    #: hugepage pool; and when ``max`` is above that limit, what it was raised to and
    #: the limit it was raised from (``max_limit``, else equal to ``max``).
    max_cause: MemoryCause = "host_memtotal"
    max_raised: Optional[MaxRaise] = None
    max_limit: int = 0

    @property
    def delta(self) -> int:
        return self.target - self.current

    @property
    def shrink(self) -> bool:
        return self.target < self.current


@frozen
class VcpuPlan:
    """The vCPU side of a plan (previewed; vCPU hotplug is not carried out)."""

    host: int
    max: int
    default: Fraction
    requested: Fraction
    target: int
    clamps: tuple[Clamp, ...]
    #: What the containers' CPUs (``containers``) were added to: ``default`` itself, or
    #: under runtime-rs static sizing ``overhead_vcpus`` (planner.runtime_rs_static), the
    #: sum then booted as ``default``; ``base`` is its value.
    added_to: VcpuBase = "default_vcpus"
    base: Fraction = Fraction(0)
    containers: Fraction = Fraction(0)
    #: ``base + containers`` when the VM boots more than that (runtime-rs static sizing's
    #: at least 1 vCPU), else None: ``requested`` is the sum. Every number here is a
    #: float32, as Kata holds vCPUs (planner._plan_vcpus).
    raised_from: Optional[Fraction] = None


@frozen
class Plan:
    """What ``preview`` shows and ``apply`` carries out."""

    memory: MemoryPlan
    vcpus: VcpuPlan
    notes: tuple[Note, ...]


@frozen
class GuestUsage:
    """The guest's own view of its memory, from virtio-balloon statistics (bytes).

    A field is ``None`` when the guest did not report it (QEMU shows -1). The
    reading is as old as ``observed_at - last_update`` seconds (host clock).
    ``sequence`` counts the readings the hypervisor has received, when it can tell
    (QEMU: the balloon's statistics queue), so that a reading that arrived after an
    earlier look is told apart from it although both carry the same whole-second stamp.
    """

    total: Optional[int] = None
    available: Optional[int] = None
    free: Optional[int] = None
    disk_caches: Optional[int] = None
    major_faults: Optional[int] = None
    last_update: Optional[float] = None
    observed_at: float = 0.0
    sequence: Optional[int] = None

    @property
    def age(self) -> Optional[float]:
        if self.last_update is None or self.last_update <= 0:
            return None
        return max(self.observed_at - self.last_update, 0.0)

    @property
    def used(self) -> Optional[int]:
        if self.total is None or self.available is None:
            return None
        return max(self.total - self.available, 0)

    @property
    def reclaimable(self) -> int:
        """Conservative: page cache that is free to drop, never more than
        MemAvailable - MemFree (so tmpfs/shmem is never counted)."""
        if self.disk_caches is None or self.available is None or self.free is None:
            return 0
        return max(min(self.disk_caches, self.available - self.free), 0)


Status = Literal["Resized", "NoChange", "Deferred", "InProgress", "Infeasible"]
#: Why a shrink step may not run now (:mod:`kata_mem.core.safety`); "" when it may.
SafetyReason = Literal["", "UsageUnknown", "UsageAboveTarget", "GuestPressure"]
#: The reason of an outcome (docs, "Outcomes"); "" for Resized and NoChange.
Reason = Literal[
    SafetyReason,
    "Busy",
    "PartialShrink",
    "UnplugTimeout",
    "PlugTimeout",
    "UnplugRejected",
    "BackendError",
    "BelowBaseMemory",
    "BackendCannotShrink",
    "BackendCannotGrow",
    "NoFreeSlots",
    "NoDeviceSpace",
    "NoMemmapRoom",
    "ShrinkNotAllowed",
    "ChargeAboveLimit",
]


@frozen
class Outcome:
    """What an ``apply`` did, in KEP-1287's vocabulary (docs, "Outcomes")."""

    status: Status
    reason: Reason
    message: str
    observed: int
    target: int
    steps: tuple[Step, ...] = ()
    retry_after_s: Optional[float] = None
