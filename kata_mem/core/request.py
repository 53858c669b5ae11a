"""A sandbox request as a value: which sandbox, what it runs, where its VM is, and
what may be done. Pure: no file, socket, clock or environment.

:class:`SandboxRequest` is the shim protocol's request (schema
``kata-mem/shim-request/v1``; docs, "Runtime-shim integration") as a frozen
value. :meth:`SandboxRequest.from_json` reads and checks one, with errors that name
the field; :meth:`SandboxRequest.to_json` writes it back, which is what ``kata-mem
reconcile`` re-runs. The command line builds the same value from its options.

The values a request carries are read here, once, for every interface: CRI
sandbox-sizing annotations, cpusets, architecture names and hugepage pools.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal, Optional, Union

from kata_mem.core.errors import InputError
from kata_mem.core.fields import Fields, is_int, json_value, path, spelled_float
from kata_mem.core.model import (
    ARCHES,
    Arch,
    Container,
    Note,
    Origin,
    PodResources,
    Role,
    SandboxSizing,
    State,
    Workload,
    check_sandbox_id,
)
from kata_mem.core.units import INT64_MAX, INT64_MIN, UINT64_MAX, GiB, KiB, MiB

REQUEST_SCHEMA = "kata-mem/shim-request/v1"
RESPONSE_SCHEMA = "kata-mem/shim-response/v1"
MAX_REQUEST_BYTES = 1 << 20

Event = Literal["create", "update", "update-sandbox", "delete", "reconcile"]
#: What is to be done with a request (:class:`SandboxRequest`).
Mode = Literal["plan", "apply", "dry-run", "delete"]
EVENTS: tuple[Event, ...] = ("create", "update", "update-sandbox", "delete", "reconcile")
STATES: tuple[State, ...] = ("running", "created", "stopped")
ROLES: tuple[Role, ...] = ("app", "init", "sidecar")

#: The smallest host memory an override may give (``--host-memory``, ``host.memory_bytes``).
MIN_HOST_MEMORY = MiB

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
#: Kata's per-pod hypervisor annotations (:mod:`kata_mem.core.annotations`).
ANN_HYPERVISOR_PREFIX = "io.katacontainers.config.hypervisor."

_TOP = (
    "schema",
    "sandbox_id",
    "event",
    "config",
    "containers",
    "backend",
    "apply",
    "allow_shrink",
    "host",
    "annotations",
    "pod_resources",
    "sandbox_resources",
    "overhead",
)
_POD_RESOURCES = (
    "memory_limit_bytes",
    "hugepages_limit_bytes",
    "hugepage_limits",
    "cpu_quota",
    "cpu_period",
)
_CONTAINER = (
    "id",
    "state",
    "role",
    "memory_limit_bytes",
    "hugepages_limit_bytes",
    "hugepage_limits",
    "cpu_quota",
    "cpu_period",
    "cpuset",
)

#: Errors about a request name its fields: ``request containers[0].id: ...``.
_REQUEST = Fields("request")


# --- Host architecture names and hugepage pools -----------------------------------

#: ``uname -m`` names and Go ``GOARCH`` names of the architectures Kata builds for,
#: to the Go name kata-mem uses everywhere inside (``ARCHES``).
GO_ARCH: dict[str, Arch] = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
assert set(GO_ARCH.values()) == set(ARCHES)

#: The hugepage sizes Linux offers on each architecture, as the kernel accepts them
#: (``arch_hugetlb_valid_size``): x86_64 PMD and PUD, 2 MiB and 1 GiB
#: (arch/x86/mm/hugetlbpage.c); arm64 with 4 KiB base pages, contiguous PTE, PMD,
#: contiguous PMD and PUD, 64 KiB, 2 MiB, 32 MiB and 1 GiB (the table of
#: Documentation/arch/arm64/hugetlbpage.rst; 16 KiB and 64 KiB base-page kernels
#: offer other sizes, which kata-mem does not assume); ppc64le 16 MiB and 16 GiB with
#: the hash MMU, 2 MiB and 1 GiB with radix (arch/powerpc/mm/hugetlbpage.c); s390x
#: 1 MiB and 2 GiB, EDAT1 and EDAT2 (arch/s390/mm/hugetlbpage.c); riscv64 2 MiB and
#: 1 GiB, and 64 KiB with Svnapot (arch/riscv/mm/hugetlbpage.c).
HUGEPAGE_SIZES: dict[Arch, tuple[int, ...]] = {
    "amd64": (2 * MiB, GiB),
    "arm64": (64 * KiB, 2 * MiB, 32 * MiB, GiB),
    "ppc64le": (2 * MiB, 16 * MiB, GiB, 16 * GiB),
    "s390x": (MiB, 2 * GiB),
    "riscv64": (64 * KiB, 2 * MiB, GiB),
}
assert tuple(HUGEPAGE_SIZES) == ARCHES


def normalize_arch(name: str, what: str) -> Arch:
    """The Go name of an architecture given by its ``uname -m`` or Go name.

    The one place architecture names are read: an unknown name would silently
    lose the per-architecture vCPU cap, so it is refused.

    :raises InputError: for a name that is not one of the architectures Kata supports;
        ``what`` names where it came from.
    """
    arch = GO_ARCH.get(name)
    if arch is None:
        pairs = ", ".join("/".join(k for k, v in GO_ARCH.items() if v == go) for go in ARCHES)
        raise InputError(
            f"{what} {name!r}: not an architecture Kata supports; expected one of {pairs} "
            "(the uname -m or Go name)"
        )
    return arch


def _size_name(size: int) -> str:
    from kata_mem.core.quantity import format_quantity

    return format_quantity(Fraction(size))


def check_hugepage_size(size: int, arch: Arch, what: str) -> int:
    """``size`` (bytes), when it is a hugepage size of ``arch`` (:data:`HUGEPAGE_SIZES`).

    :raises InputError: naming ``what`` and the sizes the architecture has.
    """
    sizes = HUGEPAGE_SIZES[arch]
    if size not in sizes:
        raise InputError(
            f"{what}: page size {_size_name(size)} is not a hugepage size of {arch}; expected "
            + " or ".join(map(_size_name, sizes))
        )
    return size


def check_hugepages(
    count: int, size: int, what: str, arch: Optional[Arch] = None
) -> tuple[int, int]:
    """A hugepage pool given by hand: ``count`` pages of ``size`` bytes, a hugepage size
    of ``arch`` (of any architecture while ``arch`` is not known yet).

    :raises InputError: a negative count, or a size that is no hugepage size.
    """
    if count < 0 or count > (1 << 63) // max(size, 1):
        raise InputError(
            f"{what}: page count {count}: expected 0 or more pages, at most 2^63 bytes"
        )
    if arch is not None:
        check_hugepage_size(size, arch, what)
    elif not any(size in sizes for sizes in HUGEPAGE_SIZES.values()):
        every = sorted({s for sizes in HUGEPAGE_SIZES.values() for s in sizes})
        raise InputError(
            f"{what}: page size {_size_name(size)} is not a hugepage size of any architecture "
            f"Kata supports; expected one of {', '.join(map(_size_name, every))} (the "
            "Hugepagesize of /proc/meminfo)"
        )
    return count, size


# --- cpusets and CRI sandbox-sizing annotations ------------------------------------

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


def hypervisor_annotations(annotations: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Kata's per-pod hypervisor annotations among ``annotations``, in their order."""
    return tuple((k, v) for k, v in annotations.items() if k.startswith(ANN_HYPERVISOR_PREFIX))


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


# --- The parts of a request --------------------------------------------------------


#: The libvirt URIs kata-mem opens: local connections only, whatever wrote the URI (the
#: command line, a shim request, a saved request on disk). libvirt's other transports
#: reach another host (``ssh``, ``tcp``, ``tls``, ``libssh``) or run a command
#: (``ext``, ``?command=``); query parameters pick a command, a socket or a daemon
#: (``?socket=``, ``?netcat=``, ``?no_verify=``, ``embed?root=``), and a ``test:///FILE``
#: URI makes libvirt read that file as root (https://libvirt.org/uri.html and
#: https://libvirt.org/remote.html: transports and extra parameters).
LIBVIRT_URIS = (
    "qemu:///system",
    "qemu:///session",
    "qemu+unix:///system",
    "qemu+unix:///session",
    "test:///default",
)


#: uids and gids are 32 bits (Linux ``uid_t``); pids are positive ``pid_t``s.
_UID_MAX = (1 << 32) - 1
_PID_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class VmmIdentity:
    """Which VMM a QMP socket led to when kata-mem last connected through it: the socket
    file (its filesystem device, inode and owner) and the process listening on it (its
    uid and pid, from ``SO_PEERCRED``; pid ``None`` when the kernel cannot tell, as for a
    peer in another pid namespace).

    The saved request keeps it (``backend.vmm``), so that ``kata-mem reconcile``, the
    service's loop and ``GET /v1/sandboxes/ID`` talk only to the VMM that was applied to.
    A socket path in a directory others may write (sticky, as ``/tmp``) can be bound
    again by another user once that VMM is gone; what listens there then is another
    socket, or another process, and its VM is gone (adversarial finding A8). A path bound
    again is a new socket file (a new inode; a filesystem may reuse a freed inode number,
    which is why its owner and the listener are compared too), and the listener's
    credentials are the kernel's (unix(7), ``SO_PEERCRED``: those of the process that
    last called ``listen`` on the socket), so none of these is chosen by whoever binds
    the path.
    """

    device: int
    inode: int
    owner_uid: int
    peer_uid: int
    peer_pid: Optional[int] = None

    def other_socket(self, device: int, inode: int, owner_uid: int) -> Optional[str]:
        """What makes the socket file now at the path another than this one, or None."""
        if (device, inode, owner_uid) == (self.device, self.inode, self.owner_uid):
            return None
        return (
            f"another socket than the one kata-mem applied through (inode {inode}, owner uid "
            f"{owner_uid}; it was inode {self.inode}, owner uid {self.owner_uid})"
        )

    def other_peer(self, uid: int, pid: Optional[int]) -> Optional[str]:
        """What makes the process listening now another than this one, or None. A pid is
        compared only when both are known."""
        known = None not in (pid, self.peer_pid)
        if uid == self.peer_uid and (not known or pid == self.peer_pid):
            return None
        return (
            f"another process listens on it than the one kata-mem applied through (uid {uid}, "
            f"pid {pid}; it was uid {self.peer_uid}, pid {self.peer_pid})"
        )

    def to_json(self) -> dict[str, Optional[int]]:
        return {
            "device": self.device,
            "inode": self.inode,
            "owner_uid": self.owner_uid,
            "peer_uid": self.peer_uid,
            "peer_pid": self.peer_pid,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], at: str) -> VmmIdentity:
        """:raises InputError: a missing field, or one that is not an integer in range."""
        _REQUEST.only(doc, ("device", "inode", "owner_uid", "peer_uid", "peer_pid"), at)

        def required(key: str, maximum: int) -> int:
            return _REQUEST.required_integer(doc, key, at, minimum=0, maximum=maximum)

        return cls(
            required("device", UINT64_MAX),
            required("inode", UINT64_MAX),
            required("owner_uid", _UID_MAX),
            required("peer_uid", _UID_MAX),
            _REQUEST.integer(doc, "peer_pid", at, minimum=1, maximum=_PID_MAX),
        )


@dataclass(frozen=True)
class Endpoint:
    """Where a VM's hypervisor listens: a QMP socket, or a libvirt URI and domain.

    ``vmm`` (QMP only) is the VMM the socket led to when kata-mem last applied through
    it, kept in the saved request: a later call through that request talks to that VMM
    only, and finds the VM gone when another listens there (:class:`VmmIdentity`).

    ``saved`` marks an endpoint read from a saved request (input from disk, which no
    caller named just now). One without a ``vmm`` was saved by a kata-mem older than the
    pin: it leads only to a socket and a listener that are root's or the caller's, on a
    way no other user can swap, until a call through it pins the VMM (adversarial
    finding B1). Not saved itself: a request written back carries the ``vmm`` instead.

    :raises InputError: (on construction) a libvirt URI that is not one of
        :data:`LIBVIRT_URIS`; every interface builds its endpoint here, so every one
        is checked the same way.
    """

    kind: Literal["qmp", "libvirt"]
    target: str
    domain: str = ""
    vmm: Optional[VmmIdentity] = None
    saved: bool = field(default=False, compare=False)

    @property
    def unpinned(self) -> bool:
        """A saved QMP endpoint whose VMM is not pinned: it must prove whose it is."""
        return self.saved and self.kind == "qmp" and self.vmm is None

    def __post_init__(self) -> None:
        if self.kind == "libvirt" and self.target not in LIBVIRT_URIS:
            raise InputError(
                f"libvirt URI {json.dumps(self.target)[:200]}: not a local connection; expected "
                f"one of {', '.join(LIBVIRT_URIS)} (kata-mem runs as root: no remote transport, "
                "no command, no query parameters)"
            )

    def describe(self) -> str:
        return (
            f"QMP {self.target}"
            if self.kind == "qmp"
            else f"libvirt {self.target} domain {self.domain}"
        )

    def to_json(self) -> dict[str, Any]:
        """The request's ``backend`` object."""
        if self.kind == "qmp":
            doc: dict[str, Any] = {"type": "qmp", "socket": self.target}
            if self.vmm is not None:
                doc["vmm"] = self.vmm.to_json()
            return doc
        return {"type": "libvirt", "uri": self.target, "domain": self.domain}

    @classmethod
    def from_json(cls, doc: dict[str, Any], at: str = "backend") -> Endpoint:
        """Read a request's ``backend`` object.

        :raises InputError: an unknown type, a missing or empty field, an unknown field,
            or a libvirt URI that is not local.
        """
        kind = doc.get("type")
        if kind == "qmp":
            _REQUEST.only(doc, ("type", "socket", "vmm"), at)
            vmm = _REQUEST.mapping(doc, "vmm", at)
            return cls(
                "qmp",
                _REQUEST.required_string(doc, "socket", at),
                vmm=None if vmm is None else VmmIdentity.from_json(vmm, path(at, "vmm")),
            )
        if kind == "libvirt":
            _REQUEST.only(doc, ("type", "uri", "domain"), at)
            uri = _REQUEST.required_string(doc, "uri", at)
            domain = _REQUEST.required_string(doc, "domain", at)
            try:
                return cls("libvirt", uri, domain)
            except InputError as exc:
                raise InputError(f"{_REQUEST.name(path(at, 'uri'))}: {exc.message}") from exc
        raise _REQUEST.fail(path(at, "type"), '"qmp" or "libvirt"', kind)


@dataclass(frozen=True)
class HostOverrides:
    """Host facts given instead of probed (the CLI's ``--host-*``, a request's ``host``).

    ``arch`` is a Go name (:func:`normalize_arch`); ``hugepages`` is (count, page size
    in bytes), checked by :func:`check_hugepages`.
    """

    memory: Optional[int] = None
    cpus: Optional[int] = None
    arch: Optional[Arch] = None
    hugepages: Optional[tuple[int, int]] = None
    #: The VMM's host memory cgroup directory, instead of finding it from the VMM's pid.
    cgroup: Optional[str] = None
    #: Where ``cgroup`` was given (a request field, or the option that gave it), for its
    #: errors. Not part of the request's value: a saved request reads back as a request's.
    cgroup_origin: Origin = field(default=Origin("request", "host.cgroup"), compare=False)

    def given(self) -> bool:
        return any(
            v is not None for v in (self.memory, self.cpus, self.arch, self.hugepages, self.cgroup)
        )

    def to_json(self) -> dict[str, Any]:
        """The request's ``host`` object: the overrides that are given."""
        doc: dict[str, Any] = {}
        for key, value in (
            ("memory_bytes", self.memory),
            ("cpus", self.cpus),
            ("arch", self.arch),
            ("cgroup", self.cgroup),
        ):
            if value is not None:
                doc[key] = value
        if self.hugepages is not None:
            doc["hugepages"] = {"count": self.hugepages[0], "size_bytes": self.hugepages[1]}
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], at: str = "host") -> HostOverrides:
        """Read a request's ``host`` object.

        :raises InputError: a wrongly typed or out-of-range field, an unknown
            architecture, a bad hugepage pool, or an unknown field.
        """
        _REQUEST.only(doc, ("memory_bytes", "cpus", "arch", "hugepages", "cgroup"), at)
        cgroup = _absolute(
            _REQUEST.string(doc, "cgroup", at), path(at, "cgroup"), "cgroup directory"
        )
        name = _REQUEST.string(doc, "arch", at)
        arch = None if name is None else normalize_arch(name, _REQUEST.name(path(at, "arch")))
        pool = None
        pages = _REQUEST.mapping(doc, "hugepages", at)
        if pages is not None:
            where = path(at, "hugepages")
            _REQUEST.only(pages, ("count", "size_bytes"), where)
            pool = check_hugepages(
                _REQUEST.required_integer(pages, "count", where, minimum=0),
                _REQUEST.required_integer(pages, "size_bytes", where, minimum=1),
                _REQUEST.name(where),
                arch,  # else the host's, checked when it is probed
            )
        return cls(
            memory=_REQUEST.integer(doc, "memory_bytes", at, minimum=MIN_HOST_MEMORY),
            cpus=_REQUEST.integer(doc, "cpus", at, minimum=1),
            arch=arch,
            hugepages=pool,
            cgroup=cgroup,
        )


def _absolute(value: Optional[str], at: str, what: str) -> Optional[str]:
    """``value``, a path a request names, which must be absolute: a shim runs in a
    directory of its own, and ``kata-mem reconcile`` (or ``serve``) re-runs the request
    from another, where a relative path names something else, or nothing.

    :raises InputError: naming the field ``at``.
    """
    if value is not None and not value.startswith("/"):
        raise _REQUEST.fail(at, f"an absolute path (a {what})", value)
    return value


def _hugepage_limits_json(pairs: tuple[tuple[int, int], ...]) -> dict[str, Any]:
    if not pairs:
        return {}
    return {"hugepage_limits": [{"page_size_bytes": size, "limit_bytes": n} for size, n in pairs]}


def _hugepage_limits(
    item: dict[str, Any], at: str, total: int
) -> tuple[tuple[tuple[int, int], ...], int]:
    """An object's ``hugepage_limits`` (the limit of each page size, as the CRI's
    ``HugepageLimit`` list has them) and the hugepage total: their sum, which
    ``hugepages_limit_bytes``, when given too, must be.

    :raises InputError: not a list of objects, a page size that is no hugepage size of
        any architecture, a size given twice, or a total that is not the sum.
    """
    items = item.get("hugepage_limits")
    if items is None:
        return (), total
    where = path(at, "hugepage_limits")
    if not isinstance(items, list):
        raise _REQUEST.fail(where, "null or a list of {page_size_bytes, limit_bytes}", items)
    pairs: dict[int, int] = {}
    for i, given in enumerate(items):
        one = path(where, i)
        entry = _REQUEST.object(given, one)
        _REQUEST.only(entry, ("page_size_bytes", "limit_bytes"), one)
        size = _REQUEST.required_integer(entry, "page_size_bytes", one, minimum=1)
        check_hugepages(0, size, _REQUEST.name(path(one, "page_size_bytes")))
        if size in pairs:
            raise _REQUEST.fail(path(one, "page_size_bytes"), "each page size once", size)
        pairs[size] = _REQUEST.required_integer(entry, "limit_bytes", one, minimum=0)
    summed = min(sum(pairs.values()), INT64_MAX)
    if item.get("hugepages_limit_bytes") is not None and total != summed:
        raise _REQUEST.fail(
            path(at, "hugepages_limit_bytes"),
            f"the sum of hugepage_limits ({summed}) or null",
            total,
        )
    return tuple(sorted(pairs.items())), summed


def pod_resources_json(pod: PodResources) -> dict[str, Any]:
    """A request's ``pod_resources``: the limits the pod sets, in the container fields' units."""
    doc: dict[str, Any] = {}
    if pod.memory is not None:
        doc["memory_limit_bytes"] = pod.memory
    if pod.hugepages is not None:
        doc["hugepages_limit_bytes"] = pod.hugepages
    doc.update(_hugepage_limits_json(pod.hugepage_limits))
    if pod.cpu is not None:
        doc["cpu_quota"], doc["cpu_period"] = pod.cpu.numerator, pod.cpu.denominator
    return doc


def _pod_resources(doc: dict[str, Any]) -> Optional[PodResources]:
    """A request's ``pod_resources`` (KEP-2837 pod-level limits), read as a container's
    resources are: a memory or hugepages limit of null, 0 or less is none, and so is a
    CPU quota or period of null or 0 (or a negative quota, CFS's "unlimited")."""
    item = _REQUEST.mapping(doc, "pod_resources")
    if item is None:
        return None
    at = "pod_resources"
    _REQUEST.only(item, _POD_RESOURCES, at)
    memory = _REQUEST.integer(item, "memory_limit_bytes", at) or 0
    hugepages = _REQUEST.integer(item, "hugepages_limit_bytes", at, minimum=0) or 0
    sizes, hugepages = _hugepage_limits(item, at, hugepages)
    quota = _REQUEST.integer(item, "cpu_quota", at) or 0
    period = _REQUEST.integer(item, "cpu_period", at, minimum=0) or 0
    return PodResources(
        memory if memory > 0 else None,
        Fraction(quota, period) if quota > 0 and period > 0 else None,
        hugepages if hugepages > 0 else None,
        "request pod_resources",
        sizes,
    )


def _container_json(c: Container) -> dict[str, Any]:
    return {
        "id": c.name,
        "state": c.state,
        "role": c.role,
        "memory_limit_bytes": c.memory_limit,
        "hugepages_limit_bytes": c.hugepages_limit,
        **_hugepage_limits_json(c.hugepage_limits),
        "cpu_quota": c.cpu.numerator,
        "cpu_period": c.cpu.denominator,
        # Only the size of a cpuset counts, so any set of that size reproduces it.
        **({"cpuset": f"0-{c.cpuset_cpus - 1}"} if c.cpuset_cpus > 0 else {}),
    }


def _container(item: Any, at: str) -> Container:
    if not isinstance(item, dict):
        raise _REQUEST.fail(at, "an object", item)
    _REQUEST.only(item, _CONTAINER, at)
    state = _REQUEST.choice(item, "state", STATES, at, "running")
    role = _REQUEST.choice(item, "role", ROLES, at, "app")
    limit = _REQUEST.integer(item, "memory_limit_bytes", at) or 0
    hugepages = _REQUEST.integer(item, "hugepages_limit_bytes", at, minimum=0) or 0
    sizes, hugepages = _hugepage_limits(item, at, hugepages)
    quota = _REQUEST.integer(item, "cpu_quota", at) or 0
    period = _REQUEST.integer(item, "cpu_period", at, minimum=0) or 0
    cpu = Fraction(quota, period) if quota > 0 and period > 0 else Fraction(0)
    name = _REQUEST.required_string(item, "id", at)
    cpuset, cpus = item.get("cpuset"), 0
    if cpuset is not None:
        if not isinstance(cpuset, str):
            raise _REQUEST.fail(path(at, "cpuset"), 'null or a CPU list such as "0-3,7"', cpuset)
        cpus = cpuset_size(cpuset, _REQUEST.name(path(at, "cpuset")))
    return Container(
        name, max(limit, 0), hugepages, cpu, role, state, _REQUEST.name(at), cpus, sizes
    )


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


#: Where a lone surrogate can come from once the text is strict UTF-8: an escape
#: ``\uD800``-``\uDFFF``. A cheap filter: a match only means the decoded document is checked.
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _decode(raw: bytes) -> Any:
    """``json.loads``, refusing what JSON can carry but a request must not: a key given
    twice in one object (decoders disagree on which one counts, so an ``event`` given
    twice could mean ``update`` to the shim and ``delete`` to kata-mem), and text that
    is not UTF-8 (lone surrogates such as ``"\\udcff"``), which no path or id can be.

    The bytes are decoded as strict UTF-8 first: ``json.loads`` given bytes would
    guess UTF-16 or UTF-32 and skip a byte-order mark, and a JSON text exchanged between
    systems is UTF-8 without one (RFC 8259, section 8.1).

    :raises InputError: naming the byte, key or value and its path.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"request: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8; "
            "expected UTF-8 JSON"
        ) from exc
    if text.startswith("\ufeff"):
        raise InputError(
            "request: starts with a byte-order mark (U+FEFF); expected UTF-8 JSON without one"
        )
    if "\x00" in text:
        raise InputError(
            f"request: a NUL byte at offset {raw.index(0)} (UTF-16 or UTF-32 text?); "
            "expected UTF-8 JSON"
        )
    duplicates: dict[int, str] = {}

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    duplicates[id(obj)] = key
                    break
                seen.add(key)
        return obj

    try:
        doc = json.loads(text, object_pairs_hook=pairs_hook, parse_float=spelled_float)
    except RecursionError as exc:
        # Python's own words ("maximum recursion depth exceeded while decoding...") name
        # its interpreter, not the request.
        raise InputError(
            "request: nested too deeply to read (more than a few hundred levels of arrays "
            "and objects); a shim request is a few levels deep"
        ) from exc
    except ValueError as exc:
        raise InputError(f"request is not JSON: {exc}") from exc
    if not duplicates and not _MAYBE_SURROGATE.search(text):
        return doc  # the usual case: nothing to find, no walk
    # Depth-first in document order, without recursion (json.loads has already
    # bounded the depth, but the walk may start deeper in the stack than it did).
    todo: list[tuple[str, Any]] = [("", doc)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise InputError(
                    f"request {where or 'document'}: {json.dumps(value)[:80]} is not valid "
                    "Unicode (a lone surrogate); expected UTF-8 text"
                ) from exc
        elif isinstance(value, dict):
            if id(value) in duplicates:
                key = duplicates[id(value)]
                raise InputError(
                    f"request {path(where, key)}: the key {json.dumps(key)} is given more than "
                    "once in one object; expected each key once"
                )
            children: list[tuple[str, Any]] = []
            for key, item in value.items():
                children += [(f"{where or 'document'} key", key), (path(where, key), item)]
            todo.extend(reversed(children))
        elif isinstance(value, list):
            todo.extend(reversed([(path(where, i), v) for i, v in enumerate(value)]))
    return doc


def _kind(value: Any) -> str:
    """A JSON value by its type, with its text when it is a number or a boolean."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    kind = "a boolean" if isinstance(value, bool) else "a number"
    return f"{kind}, {json_value(value)}"


# --- A pod's new resources (CRI UpdatePodSandboxResources) -------------------------

#: What the sandbox's resources are read as, in errors and notes.
RESOURCES_ORIGIN = "request sandbox_resources"
OVERHEAD_ORIGIN = "request overhead.memory_limit_bytes"


@dataclass(frozen=True)
class SandboxResources:
    """The parts of a CRI ``LinuxContainerResources`` that size a sandbox, as
    ``UpdatePodSandboxResourcesRequest`` carries them in ``resources`` and ``overhead``
    (kubernetes/cri-api pkg/apis/runtime/v1/api.proto): the memory limit in bytes (0 or
    negative: none, as the kubelet sends a pod without one) and the CFS quota and period.
    """

    memory_limit: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0

    @property
    def memory(self) -> int:
        """The memory limit, 0 for none."""
        return max(self.memory_limit, 0)

    @property
    def cpu(self) -> Fraction:
        """CPUs as quota/period (0 without a positive quota and period: -1 is unlimited)."""
        if self.cpu_quota > 0 and self.cpu_period > 0:
            return Fraction(self.cpu_quota, self.cpu_period)
        return Fraction(0)

    def to_json(self) -> dict[str, int]:
        return {
            "memory_limit_bytes": self.memory_limit,
            "cpu_quota": self.cpu_quota,
            "cpu_period": self.cpu_period,
        }

    @classmethod
    def from_json(
        cls, doc: dict[str, Any], at: str, memory_minimum: int = INT64_MIN
    ) -> SandboxResources:
        """:raises InputError: an unknown field, or one that is not an integer in range."""
        _REQUEST.only(doc, ("memory_limit_bytes", "cpu_quota", "cpu_period"), at)
        return cls(
            _REQUEST.integer(doc, "memory_limit_bytes", at, minimum=memory_minimum) or 0,
            _REQUEST.integer(doc, "cpu_quota", at) or 0,
            _REQUEST.integer(doc, "cpu_period", at, minimum=0) or 0,
        )


@dataclass(frozen=True)
class SandboxResize:
    """A pod's new resources, as the kubelet sends them before it writes the pod cgroup
    (``UpdatePodSandboxResources``, kubernetes PR #137555): ``resources`` is the pod
    cgroup's configuration less the RuntimeClass ``overhead`` (kubelet
    ``generateUpdatePodSandboxResourcesRequest``, pkg/kubelet/kuberuntime)."""

    resources: SandboxResources
    overhead: SandboxResources = field(default_factory=SandboxResources)

    @property
    def pod_limit(self) -> Optional[int]:
        """The pod cgroup's memory limit the kubelet is about to set: resources plus
        overhead (``subtractOverheadFromResourceConfig`` took the overhead out); ``None``
        when the pod has none."""
        if self.resources.memory == 0:
            return None
        return min(self.resources.memory + self.overhead.memory, INT64_MAX)

    def workload(self) -> Workload:
        """What the sandbox is sized from: the new resources, the sum of the containers'
        limits as the kubelet sees the pod (on a grow the containers are updated only
        after the pod cgroup, so their limits would be the old ones), and the overhead."""
        overhead = self.overhead.memory or None
        return Workload(
            (),
            SandboxSizing(
                self.resources.memory,
                self.resources.cpu,
                RESOURCES_ORIGIN,
                source="the pod's new resources (CRI UpdatePodSandboxResources)",
            ),
            overhead,
            OVERHEAD_ORIGIN if overhead is not None else "",
        )


# --- The request -------------------------------------------------------------------


def _document(data: Union[bytes, dict[str, Any]]) -> dict[str, Any]:
    """A request's document: its raw bytes decoded (or the document already decoded,
    whose keys and text are then taken as they are), an object of the schema, with
    known keys only.

    :raises InputError: as :meth:`SandboxRequest.from_json`.
    """
    if isinstance(data, bytes):
        if len(data) > MAX_REQUEST_BYTES:
            raise InputError(f"request larger than {MAX_REQUEST_BYTES} bytes")
        try:
            doc = _decode(data)
        except InputError as exc:
            # json.loads raises a plain ValueError (its syntax errors are
            # JSONDecodeErrors, text errors UnicodeErrors) for one thing only: an
            # integer longer than int() converts, whose message is Python's advice
            # to raise sys.set_int_max_str_digits(). Say what a request may hold.
            if type(exc.__cause__) is ValueError:
                raise InputError(
                    "request: a number of thousands of digits; expected integers of at "
                    f"most 64 bits ({INT64_MIN} to {UINT64_MAX})"
                ) from exc
            raise
    else:
        doc = data
    if not isinstance(doc, dict):
        raise _REQUEST.fail("", "a JSON object", doc)
    if doc.get("schema") != REQUEST_SCHEMA:
        raise InputError(
            f"request schema: expected {REQUEST_SCHEMA!r}, got {json.dumps(doc.get('schema'))[:80]}"
        )
    _REQUEST.only(doc, _TOP)
    return doc


@dataclass(frozen=True)
class RequestHead:
    """What a request names: its sandbox and its backend (``None``: none given)."""

    sandbox: str
    endpoint: Optional[Endpoint]


def _head(doc: dict[str, Any]) -> RequestHead:
    """The sandbox and the backend of a request's document (:func:`_document`), checked.

    :raises InputError: as :meth:`SandboxRequest.from_json`.
    """
    sandbox = _REQUEST.required_string(doc, "sandbox_id")
    try:
        check_sandbox_id(sandbox)
    except InputError as exc:
        raise InputError(f"request sandbox_id: {exc.message}") from exc
    backend = _REQUEST.mapping(doc, "backend")
    endpoint = None if backend is None else Endpoint.from_json(backend)
    if endpoint is not None and endpoint.kind == "qmp":
        _absolute(endpoint.target, "backend.socket", "QMP unix socket")
    return RequestHead(sandbox, endpoint)


def request_head(raw: bytes) -> RequestHead:
    """The sandbox and the backend of the request ``raw``, read only as far as they go:
    its document and those two checked as :meth:`SandboxRequest.from_json` checks them,
    the workload neither read nor checked (what ``status --all`` shows of a saved request).

    :raises InputError: as :meth:`SandboxRequest.from_json`, for what is read.
    """
    return _head(_document(raw))


@dataclass(frozen=True)
class SandboxRequest:
    """One request about one sandbox, and what is to be done with it (``mode``):

    - ``plan``: plan it against a freshly booted VM, as ``preview`` does; nothing runs;
    - ``apply``: resize the VM at ``endpoint``;
    - ``dry-run``: run the plan on an in-memory copy of the VM (read from ``endpoint``
      when given) and change nothing (the command line's ``apply --dry-run``);
    - ``delete``: forget the sandbox's state.

    ``event`` is what the shim said happened (``create``, ``update``, ``delete``,
    ``reconcile``); a ``delete`` event is the delete mode. ``config`` ``None`` means where
    Kata looks; ``host`` overrides the host probe.
    """

    sandbox: str
    event: Event = "update"
    config: Optional[str] = None
    workload: Workload = field(default_factory=Workload)
    endpoint: Optional[Endpoint] = None
    mode: Mode = "plan"
    allow_shrink: bool = False
    host: HostOverrides = field(default_factory=HostOverrides)
    #: The pod's new resources (event ``update-sandbox``, and the ``reconcile`` that
    #: repeats one); the workload is then :meth:`SandboxResize.workload`.
    resize: Optional[SandboxResize] = None

    def __post_init__(self) -> None:
        if self.mode == "apply" and self.endpoint is None:
            raise InputError("request apply: true needs a backend")
        if (self.event == "delete") != (self.mode == "delete"):
            raise ValueError(f"event {self.event!r} with mode {self.mode!r}")
        if self.event == "update-sandbox" and self.resize is None:
            raise InputError(
                "request event update-sandbox needs sandbox_resources (the pod's new resources "
                "from UpdatePodSandboxResourcesRequest.resources)"
            )
        if self.resize is not None and self.event not in ("update-sandbox", "reconcile"):
            raise InputError(
                f"request sandbox_resources with event {self.event}: expected event "
                "update-sandbox (container limits go in containers[])"
            )

    def to_json(self) -> dict[str, Any]:
        """The request as the shim reads it (schema ``kata-mem/shim-request/v1``)."""
        doc: dict[str, Any] = {
            "schema": REQUEST_SCHEMA,
            "sandbox_id": self.sandbox,
            "event": self.event,
            "config": self.config,
            "containers": [_container_json(c) for c in self.workload.containers],
            "backend": None if self.endpoint is None else self.endpoint.to_json(),
            "apply": self.mode == "apply",
            "allow_shrink": self.allow_shrink,
        }
        if self.host.given():
            doc["host"] = self.host.to_json()
        if self.resize is not None:  # the workload is made from it
            doc["sandbox_resources"] = self.resize.resources.to_json()
            doc["overhead"] = self.resize.overhead.to_json()
            return doc
        annotations: dict[str, str] = {}
        if self.workload.sizing is not None:
            annotations.update(sizing_annotations(self.workload.sizing))
        if self.workload.overhead is not None:
            annotations[ANN_POD_OVERHEAD] = str(self.workload.overhead)
        annotations.update(self.workload.hypervisor)
        if annotations:
            doc["annotations"] = annotations
        if self.workload.pod is not None:
            doc["pod_resources"] = pod_resources_json(self.workload.pod)
        return doc

    @classmethod
    def from_json(cls, data: Union[bytes, dict[str, Any]]) -> SandboxRequest:
        """Read and check a request: its raw bytes, or the document already decoded
        (whose keys and text are then taken as they are).

        :raises InputError: too large, not JSON, a key given twice, text that is not
            UTF-8, an unknown schema version, a missing or wrongly typed field (named),
            or an unknown field.
        """
        doc = _document(data)
        head = _head(doc)
        sandbox, endpoint = head.sandbox, head.endpoint
        event = _REQUEST.choice(doc, "event", EVENTS)
        config = _absolute(_REQUEST.string(doc, "config"), "config", "Kata configuration file")
        items = doc.get("containers", [])
        if not isinstance(items, list):
            raise _REQUEST.fail("containers", "a list", items)
        containers = unique_containers(
            tuple(_container(item, path("containers", i)) for i, item in enumerate(items))
        )
        apply = _REQUEST.boolean(doc, "apply")
        mode: Mode = "delete" if event == "delete" else "apply" if apply else "plan"
        host = _REQUEST.mapping(doc, "host")
        overrides = HostOverrides() if host is None else HostOverrides.from_json(host)
        annotations = doc.get("annotations")
        sizing = None
        overhead: Optional[tuple[int, str]] = None
        hypervisor: tuple[tuple[str, str], ...] = ()
        if annotations is not None:
            if not isinstance(annotations, dict):
                raise _REQUEST.fail("annotations", "an object of strings", annotations)
            for key, value in annotations.items():
                if not isinstance(value, str):
                    # Named by key and type: Kubernetes annotation values are strings
                    # (ObjectMeta.Annotations is map[string]string), a number is a mistake.
                    where = _REQUEST.name(path("annotations", key))
                    raise InputError(f"{where}: expected a string, got {_kind(value)}")
            if any(k in annotations for k in SANDBOX_SIZING_KEYS):
                sizing = sandbox_sizing(annotations, "request annotations")
            overhead = overhead_annotation(annotations, "request annotations")
            hypervisor = hypervisor_annotations(annotations)
        pod = _pod_resources(doc)
        workload = Workload(
            containers,
            sizing,
            overhead[0] if overhead is not None else None,
            f"annotation {overhead[1]}" if overhead is not None else "",
            pod,
            hypervisor,
            "request annotations" if hypervisor else "",
        )
        resize = _resize(doc)
        if resize is not None:
            if containers or annotations or pod is not None:
                raise InputError(
                    "request sandbox_resources: expected no containers, no annotations and no "
                    "pod_resources with it (the pod's new resources size the sandbox; container "
                    "limits come with event update)"
                )
            workload = resize.workload()
        return cls(
            sandbox=sandbox,
            event=event,
            config=config,
            workload=workload,
            endpoint=endpoint,
            mode=mode,
            allow_shrink=_REQUEST.boolean(doc, "allow_shrink"),
            host=overrides,
            resize=resize,
        )


def _resize(doc: dict[str, Any]) -> Optional[SandboxResize]:
    """The request's ``sandbox_resources`` and ``overhead``, or ``None`` without them.

    :raises InputError: a wrongly typed field, or ``overhead`` without ``sandbox_resources``.
    """
    resources = _REQUEST.mapping(doc, "sandbox_resources")
    overhead = _REQUEST.mapping(doc, "overhead")
    if resources is None:
        if overhead is not None:
            raise InputError("request overhead: expected it only with sandbox_resources")
        return None
    return SandboxResize(
        SandboxResources.from_json(resources, "sandbox_resources"),
        SandboxResources()
        if overhead is None
        # An overhead is a size (a RuntimeClass's overhead.podFixed, which the API server
        # holds non-negative: kubernetes pkg/apis/node/validation validateOverhead), never
        # the negative "none" a limit may be.
        else SandboxResources.from_json(overhead, "overhead", memory_minimum=0),
    )


@dataclass(frozen=True)
class CallOptions:
    """What one process adds to every request it serves, which no request carries: the
    state directory (``--state-dir``; ``None``: the configuration's) and ``force``
    (``apply --force``: skip the shrink checks, for tests and benchmarks only)."""

    state_dir: Optional[str] = None
    force: bool = False
