"""The libvirt backend, over libvirt-python (the ``kata-mem[libvirt]`` extra).

It reads the live domain XML for what is plugged and translates steps into
device attach/detach/update calls. A detach can return before the guest has
released the memory, so completion comes from libvirt's events
(``DEVICE_REMOVED``, ``DEVICE_REMOVAL_FAILED``, ``MEMORY_DEVICE_SIZE_CHANGE``)
and from the live XML, never from a returned call. libvirt errors become the
kata-mem error tree here, with the libvirt error code name and text kept.

Device ids: kata-mem names its DIMMs with libvirt *user aliases*, which must
start with ``ua-``; the id the rest of kata-mem sees is the alias without that
prefix (``ua-kmdimm0`` -> ``kmdimm0``). The alias is only a name: whether a DIMM is
kata-mem's is decided from its journal (:func:`kata_mem.core.reports.owned_view`), as for
QEMU. libvirt creates and removes a DIMM's memory backend with the device and shows
none, so there are no backend objects to own or delete here.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any, Optional, TypeVar

from kata_mem.core.errors import (
    BackendError,
    BackendUnavailable,
    BackendUnsupported,
    MissingDependency,
)
from kata_mem.core.values import replace

try:
    import libvirt
except ImportError as exc:  # only the `libvirt` extra installs it
    raise MissingDependency(
        f"the libvirt backend needs libvirt-python, which cannot be imported ({exc}); "
        "install it with: pip install 'kata-mem[libvirt]' (it builds against libvirt-dev and pkg-config)"
    ) from exc
from kata_mem.core.model import GuestUsage, MemoryDevice, Step, VmState
from kata_mem.core.reports import StepProgress, UsageField, balloon_usage, resize_progress, vm_state
from kata_mem.core.units import KiB, to_kib_floor
from kata_mem.edges.logs import get_logger

log = get_logger(__name__)
T = TypeVar("T")

USER_ALIAS = "ua-"
_UNITS = {
    "b": 1, "bytes": 1, "k": KiB, "kib": KiB, "kb": 1000, "m": KiB**2, "mib": KiB**2, "mb": 1000**2,
    "g": KiB**3, "gib": KiB**3, "gb": 1000**3, "t": KiB**4, "tib": KiB**4, "tb": 1000**4,
}  # fmt: skip
#: libvirt error codes that mean "this driver cannot do that at all".
_UNSUPPORTED = {
    libvirt.VIR_ERR_NO_SUPPORT,
    libvirt.VIR_ERR_OPERATION_UNSUPPORTED,
    libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED,
    libvirt.VIR_ERR_CONFIG_UNSUPPORTED,
}

#: libvirt sends no event for a DIMM insert: a pending step's live XML is read this often.
_XML_POLL_S = 0.05
#: memoryStats() names for each GuestUsage field (sizes in KiB): libvirt's "available" is
#: the guest's MemTotal, "usable" its MemAvailable, "unused" its MemFree.
_STATS: dict[UsageField, str] = {
    "total": "available",
    "available": "usable",
    "free": "unused",
    "disk_caches": "disk_caches",
    "major_faults": "major_fault",
}

#: VIR_DOMAIN_MEMORY_PARAM_UNLIMITED (KiB): a C macro the Python binding does not export.
_UNLIMITED_KIB = (1 << 53) - 1
#: A pid file holds one number; /proc/PID/cmdline is read only as far as ``-name``.
_PID_FILE_MAX = 64
_CMDLINE_MAX = 64 * 1024

_event_loop_started = False
_event_loop_lock = threading.Lock()


def _start_event_loop() -> None:
    """libvirt delivers events only to a registered loop that someone runs.

    The default implementation is registered once per process, before any
    connection, and run in a daemon thread.
    """
    global _event_loop_started  # noqa: PLW0603 - one loop per process, by libvirt's design
    with _event_loop_lock:
        if _event_loop_started:
            return
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _event_loop_started = True


def _code_name(code: int) -> str:
    for name in dir(libvirt):
        if name.startswith("VIR_ERR_") and getattr(libvirt, name) == code:
            return name
    return f"VIR_ERR_{code}"


def _message(exc: libvirt.libvirtError) -> str:
    """libvirt's own text for an error, never empty."""
    text = " ".join(str(exc.get_error_message() or exc).split())
    return text or "(libvirt gave no message)"


def _translate(
    exc: libvirt.libvirtError, what: str, where: str
) -> BackendError | BackendUnavailable:
    code = exc.get_error_code() or 0
    # The error code name is part of what the user reads (docs, exit 7).
    context, name, text = f"{where}: {what} failed", _code_name(code), _message(exc)
    if code in _UNSUPPORTED:
        return BackendUnsupported.naming(context, name, text)
    if code in (libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_ERR_RPC):
        return BackendUnavailable(f"{context}: {name}: {text}")
    return BackendError.naming(context, name, text)


def _qemu_run_dir(uri: str, env: Mapping[str, str]) -> Optional[Path]:
    """Where libvirt's QEMU driver writes a domain's pid file; None for other drivers
    and for a remote daemon (its pids are not ours to read). ``env`` is the caller's
    environment (a session daemon's directory follows ``XDG_RUNTIME_DIR``)."""
    parsed = urllib.parse.urlsplit(uri)
    if parsed.scheme.split("+")[0] != "qemu" or parsed.hostname:
        return None
    if parsed.path == "/system":
        return Path("/run/libvirt/qemu")
    if parsed.path == "/session":
        # libvirt's fallback when there is no runtime dir is the user's cache dir.
        runtime = (
            env.get("XDG_RUNTIME_DIR")
            or env.get("XDG_CACHE_HOME")
            or os.path.expanduser("~/.cache")
        )
        return Path(runtime, "libvirt", "qemu", "run")
    return None


def _read_start(path: Path, limit: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def qemu_pid(uri: str, name: str, env: Mapping[str, str]) -> Optional[int]:
    """The pid of the QEMU process that runs domain ``name`` under ``uri``, or None.

    libvirt has no API for it; its QEMU driver writes ``<run dir>/NAME.pid``. The pid is
    taken only if that process runs with ``-name guest=NAME``, so a stale file whose pid
    was reused is never trusted.
    """
    run_dir = _qemu_run_dir(uri, env)
    if run_dir is None:
        return None
    try:
        pid = int(_read_start(run_dir / f"{name}.pid", _PID_FILE_MAX).strip() or b"0")
        argv = _read_start(Path(f"/proc/{pid}/cmdline"), _CMDLINE_MAX).split(b"\0")
    except (OSError, ValueError) as exc:
        log.debug("domain %s: no QEMU pid from %s: %s", name, run_dir, exc)
        return None
    # libvirt passes -name guest=NAME,debug-threads=on with commas in NAME doubled.
    guest = b"guest=" + name.replace(",", ",,").encode()
    named = any(
        flag == b"-name" and (value == guest or value.startswith(guest + b","))
        for flag, value in pairwise(argv)
    )
    if pid <= 0 or not named:
        log.debug("domain %s: pid %d in %s is not its QEMU", name, pid, run_dir)
        return None
    return pid


def _open(uri: str, how: Callable[[str], Any]) -> Any:
    """A connection to ``uri`` made by ``how`` (``libvirt.open``, ``libvirt.openReadOnly``).

    :raises BackendUnavailable: the daemon cannot be reached.
    """
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # errors come as exceptions
    try:
        return how(uri)
    except libvirt.libvirtError as exc:
        raise BackendUnavailable(
            f"libvirt {uri}: cannot connect: {_message(exc)} (is libvirtd running, and may "
            "this user use the URI?)"
        ) from exc


def _running(conn: Any, uri: str, domain: str) -> Any:
    """The running domain ``domain``: the one decision about it for connecting and for
    :func:`presence`.

    :raises BackendUnavailable: there is no such domain (``gone``), it cannot be looked
        up, or it is not running.
    """
    try:
        dom = conn.lookupByName(domain)
    except libvirt.libvirtError as exc:
        raise BackendUnavailable(
            f"libvirt {uri}: domain {domain!r}: {_message(exc)} (virsh -c {uri} list --all "
            "shows the domains)",
            gone=exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN,
        ) from exc
    if not dom.isActive():
        raise BackendUnavailable(
            f"libvirt {uri}: domain {domain!r} is not running (start it, or name a running one)"
        )
    return dom


def presence(uri: str, domain: str) -> Optional[str]:
    """Why the domain is gone, or None when it is there; decided as connecting decides,
    over a read-only connection (``virConnectOpenReadOnly``: it can change nothing, and
    registers no event callback).

    :raises BackendUnavailable: it cannot be told (the daemon cannot be reached), or the
        domain is there but not running, as connecting would say.
    """
    conn = _open(uri, libvirt.openReadOnly)
    try:
        _running(conn, uri, domain)
    except BackendUnavailable as exc:
        if exc.gone:
            return exc.message
        raise
    finally:
        conn.close()
    return None


def _size(element: Optional[ET.Element]) -> int:
    if element is None or element.text is None:
        return 0
    unit = element.get("unit", "KiB").lower()
    if unit not in _UNITS:
        raise BackendError(f"unexpected libvirt XML: unit {unit!r}", "ProtocolError")
    return int(element.text.strip()) * _UNITS[unit]


class LibvirtBackend:
    """Implements :class:`~kata_mem.backends.Backend` for a libvirt domain."""

    def __init__(
        self, uri: str, conn: Any, dom: Any, vmm_pid: Optional[int] = None, hidden: bool = False
    ) -> None:
        self.uri = uri
        self.vmm_pid = vmm_pid
        self.vmm_pid_hidden = hidden
        self._conn = conn
        self._dom = dom
        self._where = f"libvirt {uri} domain {dom.name()}"
        self._events: queue.Queue[tuple[str, str, int]] = queue.Queue()
        self._seen: list[tuple[str, str, int]] = []
        self._callbacks: list[int] = []
        for event_id, name in (
            (libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, "removed"),
            (libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVAL_FAILED, "removal-failed"),
            (libvirt.VIR_DOMAIN_EVENT_ID_MEMORY_DEVICE_SIZE_CHANGE, "size-change"),
        ):
            self._callbacks.append(
                conn.domainEventRegisterAny(dom, event_id, self._on_event(name), None)
            )

    def _on_event(self, name: str) -> Callable[..., None]:
        def callback(_conn: Any, _dom: Any, alias: str, *rest: Any) -> None:
            size = int(rest[0]) * KiB if rest and isinstance(rest[0], int) else 0
            self._events.put((name, str(alias), size))

        return callback

    @classmethod
    def connect(cls, uri: str, domain: str, env: Mapping[str, str]) -> LibvirtBackend:
        """Open ``uri`` and find the running ``domain``; nothing is set on it, so
        connecting changes nothing on the VM. ``env`` is the caller's environment (where a
        session daemon keeps QEMU's pid file).

        :raises BackendUnavailable: the daemon cannot be reached, or the domain does not
            exist (``gone``) or is not running.
        """
        _start_event_loop()
        conn = _open(uri, libvirt.open)
        try:
            dom = _running(conn, uri, domain)
            try:
                canonical = str(conn.getURI())
            except libvirt.libvirtError:
                canonical = uri
        except BaseException:
            conn.close()
            raise
        pid = qemu_pid(canonical, domain, env)
        # Only the local QEMU driver runs a QEMU on this host whose pid could be known.
        hidden = pid is None and _qemu_run_dir(canonical, env) is not None
        return cls(uri, conn, dom, pid, hidden=hidden)

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except libvirt.libvirtError as exc:
            raise _translate(exc, what, self._where) from exc

    def _xml(self) -> ET.Element:
        return ET.fromstring(self._call("XMLDesc", self._dom.XMLDesc, 0))

    def _flags(self) -> int:
        persistent = self._call("isPersistent", self._dom.isPersistent)
        return libvirt.VIR_DOMAIN_AFFECT_LIVE | (
            libvirt.VIR_DOMAIN_AFFECT_CONFIG if persistent else 0
        )

    # -- the Backend protocol ---------------------------------------------------------

    def observe(self) -> VmState:
        return replace(
            self._state(),
            vmm_pid=self.vmm_pid,
            vmm_pid_hidden=self.vmm_pid_hidden,
            vmm_hard_limit=self._hard_limit(),
        )

    def _hard_limit(self) -> Optional[int]:
        """``<memtune><hard_limit>`` in bytes; None when unlimited, unset or unreadable."""
        try:
            params: dict[str, int] = self._dom.memoryParameters(0)
        except libvirt.libvirtError as exc:
            log.debug("%s: memoryParameters: %s", self._where, _message(exc))
            return None
        kib = params.get(libvirt.VIR_DOMAIN_MEMORY_HARD_LIMIT)
        return kib * KiB if isinstance(kib, int) and 0 < kib < _UNLIMITED_KIB else None

    def _state(self) -> VmState:
        """The memory devices from the live XML (what a poll needs)."""
        root = self._xml()
        devices: list[MemoryDevice] = []
        others: list[int] = []
        for i, el in enumerate(root.findall("./devices/memory")):
            dev = self._device(el, i)
            if dev is not None:
                devices.append(dev)
            else:  # nvdimm, virtio-pmem, sgx-epc: device space, not RAM kata-mem resizes
                others.append(_size(el.find("./target/size")))
        max_el = root.find("maxMemory")
        # Aliases are unique in a domain; kata-mem's ids are user aliases without "ua-".
        aliases = [a.get("name", "") for a in root.iterfind("./devices/*/alias") if a.get("name")]
        return vm_state(
            devices=devices,
            unmanaged=others,
            numa_cells=[_size_attr(c) for c in root.findall("./cpu/numa/cell")],
            memory=_size(root.find("memory")),
            maxmem=_size(max_el) if max_el is not None else None,
            slots=int(max_el.get("slots", "0")) if max_el is not None else 0,
            other_ids=[a.removeprefix(USER_ALIAS) for a in aliases] + aliases,
        )

    @staticmethod
    def _device(el: ET.Element, index: int) -> Optional[MemoryDevice]:
        """A DIMM or virtio-mem device; None for the other models."""
        model = el.get("model", "")
        alias_el = el.find("alias")
        alias = alias_el.get("name", "") if alias_el is not None else ""
        device_id = alias.removeprefix(USER_ALIAS) if alias else f"memory{index}"
        target = el.find("target")
        size = _size(target.find("size") if target is not None else None)
        if model == "virtio-mem" and target is not None:
            return MemoryDevice(
                id=device_id,
                kind="virtio-mem",
                size=_size(target.find("current")),
                requested=_size(target.find("requested")),
                max_size=size,
                block=_size(target.find("block")),
            )
        if model != "dimm":
            return None
        slot_el = el.find("address")
        slot = (
            int(slot_el.get("slot", "0")) if slot_el is not None and slot_el.get("slot") else None
        )
        # libvirt copies QEMU's address of a DIMM into the live XML: <address type='dimm'
        # slot='0' base='0x100000000'/> (qemuDomainUpdateMemoryDeviceInfo).
        base = slot_el.get("base", "") if slot_el is not None else ""
        try:
            addr = int(base, 16) if base else None
        except ValueError:  # not libvirt's form: unknown, as when it gives none
            addr = None
        return MemoryDevice(
            id=device_id,
            kind="dimm",
            size=size,
            requested=size,
            max_size=size,
            slot=slot,
            addr=addr,
        )

    def begin(self, step: Step) -> None:
        while not self._events.empty():  # only events after this step's call are about it
            self._events.get_nowait()
        self._seen.clear()
        if step.action == "plug_dimm":
            xml = (
                f"<memory model='dimm'><target><size unit='KiB'>{_kib(step.size)}</size><node>0</node></target>"
                f"<alias name='{USER_ALIAS}{step.device}'/></memory>"
            )
            self._call("attachDeviceFlags", self._dom.attachDeviceFlags, xml, self._flags())
        elif step.action == "unplug_dimm":
            self._call(
                "detachDeviceAlias",
                self._dom.detachDeviceAlias,
                self._alias(step.device),
                self._flags(),
            )
        elif step.action == "delete_memdev":
            raise BackendUnsupported(
                f"{self._where}: cannot delete {step.device}: libvirt deletes a DIMM's memory "
                "backend with the device and reports no backend objects",
                "VIR_ERR_NO_SUPPORT",
            )
        else:
            el = self._element(step.device)
            if el is None:
                raise BackendError(
                    f"virtio-mem device {step.device} not found in the domain",
                    "VIR_ERR_DEVICE_MISSING",
                )
            target = el.find("target")
            assert target is not None
            requested = target.find("requested")
            if requested is None:
                requested = ET.SubElement(target, "requested")
            requested.set("unit", "KiB")
            requested.text = str(_kib(step.size))
            current = target.find("current")
            if current is not None:
                target.remove(current)  # output-only in libvirt's schema
            xml = ET.tostring(el, encoding="unicode")
            self._call(
                "updateDeviceFlags",
                self._dom.updateDeviceFlags,
                xml,
                libvirt.VIR_DOMAIN_AFFECT_LIVE,
            )

    def _alias(self, device_id: str) -> str:
        el = self._element(device_id)
        alias = el.find("alias") if el is not None else None
        return alias.get("name", "") if alias is not None else USER_ALIAS + device_id

    def _element(self, device_id: str) -> Optional[ET.Element]:
        for i, el in enumerate(self._xml().findall("./devices/memory")):
            dev = self._device(el, i)
            if dev is not None and dev.id == device_id:
                return el
        return None

    def poll(self, step: Step, wait_s: float = 0.0) -> StepProgress:
        progress = self._check(step)
        if progress.state == "pending" and wait_s > 0:
            with contextlib.suppress(queue.Empty):
                self._seen.append(self._events.get(timeout=min(wait_s, _XML_POLL_S)))
            progress = self._check(step)
        return progress

    def _check(self, step: Step) -> StepProgress:
        while not self._events.empty():
            self._seen.append(self._events.get_nowait())
        if step.action == "delete_memdev":
            return StepProgress("rejected", "libvirt has no memory backend objects")
        alias = USER_ALIAS + step.device
        dev = next((d for d in self._state().devices if d.id == step.device), None)
        if step.action == "plug_dimm":
            # libvirt reports no guest confirmation for a DIMM insert: present is done.
            return (
                StepProgress("done")
                if dev is not None
                else StepProgress("pending", "not in the live XML yet")
            )
        if step.action == "unplug_dimm":
            if dev is None or any(
                e[0] == "removed" and e[1] in (alias, step.device) for e in self._seen
            ):
                return StepProgress("done")
            if any(e[0] == "removal-failed" and e[1] in (alias, step.device) for e in self._seen):
                return StepProgress("rejected", "DEVICE_REMOVAL_FAILED")
            return StepProgress("pending", "waiting for DEVICE_REMOVED")
        return resize_progress(step, dev)

    @staticmethod
    def _balloon(root: ET.Element) -> Optional[ET.Element]:
        balloon = root.find("./devices/memballoon")
        return None if balloon is None or balloon.get("model") == "none" else balloon

    def guest_usage(self) -> Optional[GuestUsage]:
        if self._balloon(self._xml()) is None:
            return None
        stats: dict[str, int] = self._call("memoryStats", self._dom.memoryStats)
        return balloon_usage(
            stats,
            names=_STATS,
            unit=KiB,
            last_update=stats.get("last_update"),
            observed_at=time.time(),
        )

    def read_and_ask(self, seconds: int) -> Optional[GuestUsage]:
        # libvirt does not count the readings it receives (no sequence): a reading asked
        # for could not be told from the one before, so none is asked for.
        return self.guest_usage()

    def set_stats_interval(self, seconds: int) -> Optional[int]:
        balloon = self._balloon(self._xml())
        if balloon is None:
            return None
        stats_el = balloon.find("stats")
        before = 0 if stats_el is None else int(stats_el.get("period", "0"))
        if before != seconds:
            self._call(
                "setMemoryStatsPeriod",
                self._dom.setMemoryStatsPeriod,
                seconds,
                libvirt.VIR_DOMAIN_AFFECT_LIVE,
            )
        return before

    def close(self) -> None:
        for callback in self._callbacks:
            try:
                self._conn.domainEventDeregisterAny(callback)
            except libvirt.libvirtError as exc:
                log.debug("deregistering a libvirt event callback: %s", exc)
        try:
            self._conn.close()
        except libvirt.libvirtError as exc:
            log.debug("closing the libvirt connection: %s", exc)


def _kib(n: int) -> int:
    """Bytes in libvirt's KiB (kata-mem's sizes are whole MiB)."""
    return to_kib_floor(n)


def _size_attr(cell: ET.Element) -> int:
    unit = cell.get("unit", "KiB").lower()
    return int(cell.get("memory", "0")) * _UNITS.get(unit, KiB)
