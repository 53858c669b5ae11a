"""Boot the tiny kata-mem test guest as a real libvirt domain (QEMU TCG) and talk to it.

The domain mirrors :class:`tests.support.guestvm.GuestVM`: ``type='qemu'`` (TCG, never
KVM), q35, direct kernel boot of the test guest, serial console to ``console.log`` in
the workdir, the guest's ``ctl`` virtio-serial port as the unix socket ``ctl.sock``
(libvirt ``<channel type='unix'>``), a virtio balloon with 1 s stats and, when
``spec.virtio_mem_mib > 0``, one virtio-mem device (``requested`` 0). Memory devices
need ``<maxMemory slots=...>`` and a NUMA cell, so the domain has one cell of
``spec.base_mib``. libvirt adds the pcie-root-ports itself (one per PCI device plus
a spare one for hotplug).

libvirt is driven with ``virsh`` (no dependency on libvirt-python). Domains are named
``kata-mem-test-<random>``; ``scripts/libvirtd.sh stop`` removes any left behind.

    with LibvirtGuest(guest_dir, tmp_path, GuestSpec()) as g:
        g.virsh("update-memory-device", g.name, "--alias", g.virtio_mem_alias,
                "--requested-size", "256MiB", "--live")
        g.wait_mem(lambda m: m.total_kb >= before + 256 * 1024, timeout=15)
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol

from tests.support.guestvm import (
    GuestBootError,
    GuestControl,
    GuestControlMixin,
    GuestError,
    GuestSpec,
    kernel_image,
    socket_dir_for,
    wait_for_ready,
)

if TYPE_CHECKING:
    from types import TracebackType

DEFAULT_URI = "qemu:///system"
NAME_PREFIX = "kata-mem-test-"
VIRSH = "virsh"
QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
#: Where libvirtd (qemu:///system) keeps each domain's QEMU stderr log.
QEMU_LOG_DIR = Path("/var/log/libvirt/qemu")
_SETUP_HINT = (
    "run `scripts/install-system-deps.sh libvirt` and `scripts/libvirtd.sh start` (as root)"
)
_DEAD_STATES = frozenset({"shut off", "crashed", ""})


class LibvirtCommandError(GuestError):
    """A ``virsh`` command failed."""


class BootLibvirtGuest(Protocol):
    """Type of the ``boot_libvirt_guest`` pytest fixture."""

    def __call__(self, spec: GuestSpec = ...) -> LibvirtGuest: ...


@dataclass(frozen=True)
class DomainMemoryDevice:
    """One ``<memory>`` device of the domain XML (sizes in KiB; ``None``: not in the XML)."""

    model: str
    alias: Optional[str]
    size_kib: int
    node: Optional[int] = None
    block_kib: Optional[int] = None
    requested_kib: Optional[int] = None
    # Live XML only: what the guest has plugged. libvirt refreshes it from QEMU's
    # MEMORY_DEVICE_SIZE_CHANGE event, which QEMU throttles (about 1 s behind).
    current_kib: Optional[int] = None
    slot: Optional[int] = None


#: libvirt's scaled-integer units, in bytes.
_UNIT_BYTES = {
    "b": 1, "bytes": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3,
    "gib": 1024**3, "t": 1024**4, "tib": 1024**4, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "tb": 1000**4,
}  # fmt: skip


def _kib(elem: Optional[ET.Element]) -> Optional[int]:
    if elem is None or elem.text is None:
        return None
    return int(elem.text) * _UNIT_BYTES[elem.get("unit", "KiB").lower()] // 1024


def parse_memory_devices(domain_xml: str) -> list[DomainMemoryDevice]:
    """The ``<devices><memory>`` elements of a domain XML."""
    root = ET.fromstring(domain_xml)
    out = []
    for mem in root.findall("./devices/memory"):
        target = mem.find("target")
        if target is None:
            continue
        alias = mem.find("alias")
        node = target.findtext("node")
        address = mem.find("address")
        slot = (
            address.get("slot") if address is not None and address.get("type") == "dimm" else None
        )
        out.append(
            DomainMemoryDevice(
                model=mem.get("model", ""),
                alias=alias.get("name") if alias is not None else None,
                size_kib=_kib(target.find("size")) or 0,
                node=int(node) if node is not None else None,
                block_kib=_kib(target.find("block")),
                requested_kib=_kib(target.find("requested")),
                current_kib=_kib(target.find("current")),
                slot=int(slot, 0) if slot is not None else None,
            )
        )
    return out


def virsh(
    uri: str, *args: str, timeout: float = 60.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``virsh -c URI ARGS...`` (no shell); raise :class:`LibvirtCommandError` if ``check``."""
    argv = [VIRSH, "-q", "-c", uri, *args]
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise LibvirtCommandError(f"{VIRSH} not found: {_SETUP_HINT}") from None
    except subprocess.TimeoutExpired:
        raise LibvirtCommandError(f"{' '.join(argv)}: no answer within {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        raise LibvirtCommandError(
            f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )
    return proc


# Safety net: every defined domain is destroyed and undefined at interpreter exit.
_live: set[LibvirtGuest] = set()


@atexit.register
def _stop_all() -> None:
    for guest in list(_live):
        with contextlib.suppress(Exception):
            guest.stop()


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"<{path} not readable>"
    return "\n".join(text.splitlines()[-lines:])


class LibvirtGuest(GuestControlMixin):
    """A libvirt domain running the test guest under TCG. Use as a context manager.

    Guest control (``status``/``alloc``/``free``/``online``/``wait_mem``/``command``)
    is the same as :class:`tests.support.guestvm.GuestVM`'s. ``virtio_mem_alias``
    sets a user alias (must start with ``ua-``) on the virtio-mem device instead of
    libvirt's own (``virtiomem0``).
    """

    def __init__(
        self,
        guest_dir: Path,
        workdir: Path,
        spec: GuestSpec,
        uri: str = DEFAULT_URI,
        name: Optional[str] = None,
        *,
        virtio_mem_alias: Optional[str] = None,
    ) -> None:
        # Absolute: libvirtd resolves paths in the XML from its own working directory.
        self.guest_dir = Path(guest_dir).resolve()
        self.workdir = Path(workdir).resolve()
        self.spec = spec
        self._uri = uri
        self._name = name or NAME_PREFIX + secrets.token_hex(4)
        if virtio_mem_alias is not None and not virtio_mem_alias.startswith("ua-"):
            raise ValueError(f"libvirt user aliases start with 'ua-': {virtio_mem_alias!r}")
        self._virtio_mem_alias = virtio_mem_alias
        self.initrd = self.guest_dir / "initramfs.gz"
        self._console_log = self.workdir / "console.log"
        self._sock_dir: Optional[Path] = None  # short temp dir if workdir is too long
        self._defined = False
        self._control = GuestControl(self.is_alive, self.console_tail, "domain")
        self.boot_seconds: Optional[float] = None

    # -- properties -----------------------------------------------------------------
    @property
    def uri(self) -> str:
        return self._uri

    @property
    def name(self) -> str:
        return self._name

    @property
    def kernel(self) -> Path:
        """The kernel image the domain boots (see :attr:`GuestSpec.kernel`)."""
        return kernel_image(self.guest_dir, self.spec.kernel)

    @property
    def console_log(self) -> Path:
        return self._console_log

    @property
    def ctl_socket(self) -> Path:
        if self._sock_dir is None:
            self._sock_dir = socket_dir_for(self.workdir, "ctl.sock")
            if self._sock_dir is None:
                return self.workdir / "ctl.sock"
        return self._sock_dir / "ctl.sock"

    @property
    def xml_path(self) -> Path:
        """The domain XML written by :meth:`start`."""
        return self.workdir / "domain.xml"

    @property
    def qemu_log(self) -> Path:
        """libvirt's log of the domain's QEMU (command line, stderr)."""
        return QEMU_LOG_DIR / f"{self._name}.log"

    @property
    def virtio_mem_alias(self) -> str:
        """The alias of the virtio-mem device, as libvirt reports it in the live XML."""
        for dev in self.memory_devices():
            if dev.model == "virtio-mem" and dev.alias:
                return dev.alias
        raise GuestError(f"domain {self._name} has no virtio-mem device")

    def console_tail(self, lines: int = 40) -> str:
        return _tail(self._console_log, lines)

    # -- domain XML -----------------------------------------------------------------
    def domain_xml(self) -> str:
        """The domain XML for :attr:`spec`."""
        s = self.spec
        ET.register_namespace("qemu", QEMU_NS)
        dom = ET.Element("domain", type="qemu")
        ET.SubElement(dom, "name").text = self._name
        ET.SubElement(dom, "maxMemory", slots=str(s.slots), unit="MiB").text = str(s.maxmem_mib)
        ET.SubElement(dom, "memory", unit="MiB").text = str(s.base_mib + s.virtio_mem_mib)
        ET.SubElement(dom, "currentMemory", unit="MiB").text = str(s.base_mib)
        ET.SubElement(dom, "vcpu").text = str(s.cpus)
        if s.memory_backing:
            dom.append(ET.fromstring(f"<memoryBacking>{s.memory_backing}</memoryBacking>"))

        os_ = ET.SubElement(dom, "os")
        ET.SubElement(os_, "type", arch="x86_64", machine="q35").text = "hvm"
        ET.SubElement(os_, "kernel").text = str(self.kernel)
        ET.SubElement(os_, "initrd").text = str(self.initrd)
        append = ["console=ttyS0", "quiet", "panic=-1", "no_timer_check"]  # as GuestVM's
        if s.online_state:
            append.append(f"memhp_default_state={s.online_state}")
        append.extend(s.kernel_args)
        ET.SubElement(os_, "cmdline").text = " ".join(append)

        features = ET.SubElement(dom, "features")  # ACPI: needed for DIMM hotplug
        ET.SubElement(features, "acpi")
        ET.SubElement(features, "apic")
        numa = ET.SubElement(ET.SubElement(dom, "cpu"), "numa")
        cpus = "0" if s.cpus == 1 else f"0-{s.cpus - 1}"
        ET.SubElement(numa, "cell", id="0", cpus=cpus, memory=str(s.base_mib), unit="MiB")
        # Like QEMU's -no-reboot: a guest panic (panic=-1) or poweroff ends the domain.
        for event in ("on_poweroff", "on_reboot", "on_crash"):
            ET.SubElement(dom, event).text = "destroy"

        devices = ET.SubElement(dom, "devices")
        ET.SubElement(devices, "controller", type="usb", model="none")
        serial = ET.SubElement(devices, "serial", type="file")
        ET.SubElement(serial, "source", path=str(self._console_log))
        ET.SubElement(serial, "target", port="0")
        channel = ET.SubElement(devices, "channel", type="unix")
        ET.SubElement(channel, "source", mode="bind", path=str(self.ctl_socket))
        ET.SubElement(channel, "target", type="virtio", name="ctl")
        if s.balloon:
            balloon = ET.SubElement(devices, "memballoon", model="virtio")
            ET.SubElement(balloon, "stats", period="1")
        else:
            ET.SubElement(devices, "memballoon", model="none")  # else libvirt adds one
        if s.virtio_mem_mib > 0:
            vmem = ET.SubElement(devices, "memory", model="virtio-mem")
            target = ET.SubElement(vmem, "target")
            ET.SubElement(target, "size", unit="MiB").text = str(s.virtio_mem_mib)
            ET.SubElement(target, "node").text = "0"
            ET.SubElement(target, "block", unit="MiB").text = str(s.virtio_mem_block_mib)
            ET.SubElement(target, "requested", unit="MiB").text = "0"
            if self._virtio_mem_alias:
                ET.SubElement(vmem, "alias", name=self._virtio_mem_alias)
        if s.extra_qemu_args:
            cmdline = ET.SubElement(dom, f"{{{QEMU_NS}}}commandline")
            for arg in s.extra_qemu_args:
                ET.SubElement(cmdline, f"{{{QEMU_NS}}}arg", value=arg)
        ET.indent(dom)
        return ET.tostring(dom, encoding="unicode") + "\n"

    # -- virsh ----------------------------------------------------------------------
    def virsh(self, *args: str, timeout: float = 60.0, check: bool = True) -> str:
        """Run ``virsh -c URI ARGS...``; return its stdout."""
        return virsh(self._uri, *args, timeout=timeout, check=check).stdout

    def domstate(self) -> str:
        """``virsh domstate`` (``running``, ``shut off``, ...); ``""`` if not defined."""
        proc = virsh(self._uri, "domstate", self._name, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def dumpxml(self, inactive: bool = False) -> str:
        """The live domain XML (or the persistent one with ``inactive``)."""
        return self.virsh("dumpxml", *(["--inactive"] if inactive else []), self._name)

    def memory_devices(self, inactive: bool = False) -> list[DomainMemoryDevice]:
        return parse_memory_devices(self.dumpxml(inactive))

    # -- lifecycle ------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> LibvirtGuest:
        """Define and start the domain, wait for the guest's ready marker, connect ``ctl``."""
        if self._defined:
            raise GuestError("domain already started")
        for f in (self.kernel, self.initrd):
            if not f.is_file():
                raise GuestBootError(f"{f} missing: run scripts/build-guest.sh {self.guest_dir}")
        if shutil.which(VIRSH) is None:
            raise GuestBootError(f"{VIRSH} not found: {_SETUP_HINT}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        for p in (self._console_log, self.ctl_socket):
            p.unlink(missing_ok=True)
        self.xml_path.write_text(self.domain_xml())

        t0 = time.monotonic()
        deadline = t0 + timeout
        try:
            self.virsh("define", str(self.xml_path))
        except LibvirtCommandError as exc:
            raise GuestBootError(f"{exc}\n(is libvirtd running? {_SETUP_HINT})") from None
        self._defined = True
        _live.add(self)
        try:
            try:
                self.virsh("start", self._name, timeout=timeout)
            except LibvirtCommandError as exc:
                raise self._boot_failure(str(exc)) from None
            self._wait_ready(deadline, timeout)
            try:
                self._control.connect(self.ctl_socket, deadline)
            except GuestError as exc:
                raise self._boot_failure(str(exc)) from exc
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - t0
        return self

    def _boot_failure(self, what: str) -> GuestBootError:
        return GuestBootError(
            f"{what}\n--- QEMU log ({self.qemu_log}) ---\n{_tail(self.qemu_log, 15)}"
            f"\n--- console tail ({self._console_log}) ---\n{self.console_tail()}"
        )

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        def died() -> Optional[str]:
            state = self.domstate()
            if state in _DEAD_STATES:
                return f"domain {self._name} is {state or 'gone'} before the guest was ready"
            return None

        # virsh costs ~30 ms: the domain state is not asked on every poll.
        wait_for_ready(
            self._console_log, deadline, timeout, died, self._boot_failure, check_every=1.0
        )

    def stop(self) -> None:
        """Destroy and undefine the domain, remove the socket. Idempotent."""
        self._control.close()
        if self._defined:
            # Errors ignored: the domain may be shut off already (guest poweroff,
            # panic) or gone; undefine is what must happen.
            virsh(self._uri, "destroy", self._name, check=False)
            virsh(self._uri, "undefine", self._name, check=False)
            self._defined = False
        with contextlib.suppress(OSError):
            self.ctl_socket.unlink(missing_ok=True)
        if self._sock_dir is not None:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
        _live.discard(self)

    def is_alive(self) -> bool:
        """Whether the domain's QEMU runs (``virsh domstate`` not ``shut off``/``crashed``)."""
        return self._defined and self.domstate() not in _DEAD_STATES

    def __enter__(self) -> LibvirtGuest:
        if not self._defined:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()
