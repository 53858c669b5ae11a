"""Boot the tiny kata-mem test guest under QEMU TCG and talk to it.

The guest (``scripts/build-guest.sh`` builds ``vmlinuz``/``vmlinux`` + ``initramfs.gz``) runs
``scripts/guest/init.sh`` as /init: it prints ``KATA-MEM-GUEST-READY`` on the
serial console and serves ``status`` / ``alloc MIB`` / ``free`` / ``online`` /
``poweroff`` on the virtio-serial port ``ctl``, which QEMU exposes on the host as
the unix socket ``ctl.sock``. QMP is on ``qmp.sock``; the harness never keeps a
QMP connection open itself (QEMU serves one QMP client at a time), so tests and
kata_mem can connect to :attr:`GuestVM.qmp_socket`.

    with GuestVM(guest_dir, tmp_path, GuestSpec()) as vm:
        before = vm.status().total_kb
        ...  # hotplug through QMP
        vm.wait_mem(lambda m: m.total_kb >= before + 128 * 1024, timeout=10)

The ``ctl`` protocol client is :class:`GuestControl`; :class:`GuestControlMixin`
gives a guest object the ``command``/``status``/``alloc``/``free``/``online``/
``wait_mem`` methods on top of it (also used by ``tests/support/libvirt_guest.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    from types import TracebackType

READY_MARKER = "KATA-MEM-GUEST-READY"
QEMU_BINARY = "qemu-system-x86_64"
# sun_path is 108 bytes; leave room for the NUL.
_MAX_SOCKET_PATH = 100


class GuestError(Exception):
    """The guest did not answer as expected."""


class GuestBootError(GuestError):
    """QEMU exited or the guest did not become ready."""


@dataclass(frozen=True)
class GuestSpec:
    """What to boot. Sizes in MiB; ``virtio_mem_mib=0`` means no virtio-mem device."""

    base_mib: int = 512
    slots: int = 8
    maxmem_mib: int = 16384
    virtio_mem_mib: int = 2048
    virtio_mem_block_mib: int = 2
    balloon: bool = True
    online_state: str = "online_movable"
    cpus: int = 1
    # "auto": the PVH ELF ``vmlinux`` when build-guest.sh produced one (boots ~5 s
    # faster under TCG), else the bzImage ``vmlinuz``; or force either name.
    kernel: str = "auto"
    kernel_args: tuple[str, ...] = ()
    extra_qemu_args: tuple[str, ...] = ()
    #: libvirt domains only: the children of ``<memoryBacking>`` (e.g. a memfd source,
    #: shared, as a domain with virtiofs must have); "" for none.
    memory_backing: str = ""


@dataclass(frozen=True)
class GuestMem:
    """One ``status`` answer of the guest (from /proc/meminfo and memory blocks)."""

    total_kb: int
    avail_kb: int
    free_kb: int
    online_blocks: int
    total_blocks: int
    held_mib: int = 0

    @classmethod
    def parse(cls, line: str) -> GuestMem:
        """Parse ``MEM total_kb=.. avail_kb=.. free_kb=.. online=N/M [key=value...]``."""
        parts = line.split()
        if not parts or parts[0] != "MEM":
            raise GuestError(f"not a MEM status line: {line!r}")
        fields: dict[str, str] = {}
        for part in parts[1:]:
            key, sep, value = part.partition("=")
            if sep:
                fields[key] = value
        try:
            online, _, total = fields["online"].partition("/")
            return cls(
                total_kb=int(fields["total_kb"]),
                avail_kb=int(fields["avail_kb"]),
                free_kb=int(fields["free_kb"]),
                online_blocks=int(online),
                total_blocks=int(total),
                held_mib=int(fields.get("held_mib", "0")),
            )
        except (KeyError, ValueError) as exc:
            raise GuestError(f"malformed MEM status line: {line!r}") from exc

    @property
    def total_mib(self) -> float:
        return self.total_kb / 1024


class BootGuest(Protocol):
    """Type of the ``boot_guest`` pytest fixture."""

    def __call__(self, spec: GuestSpec = ...) -> GuestVM: ...


# Safety net: every started guest is stopped at interpreter exit (strong
# references: a forgotten GuestVM must not be garbage collected while QEMU runs).
_live: set[GuestVM] = set()


@atexit.register
def _stop_all() -> None:
    for vm in list(_live):
        with contextlib.suppress(Exception):
            vm.stop()


def _death_signal_prefix() -> list[str]:
    """``setpriv --pdeathsig TERM --``: QEMU gets SIGTERM when the test process dies.

    This covers a SIGKILL of pytest, where neither teardown nor atexit run.
    setpriv (util-linux, Essential in Debian) sets PR_SET_PDEATHSIG and execs
    QEMU, so the PID stays QEMU's. Only from the main thread: the signal fires
    when the *thread* that forked exits.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _opt(value: object) -> str:
    """Escape a value for a QEMU ``key=value,...`` option string."""
    return str(value).replace(",", ",,")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"<{path} not readable>"
    return "\n".join(text.splitlines()[-lines:])


def socket_dir_for(workdir: Path, longest_name: str) -> Optional[Path]:
    """``None`` if ``workdir/longest_name`` fits in ``sun_path``; else a new short temp dir.

    The caller owns (and removes) a returned directory.
    """
    if len(str(Path(workdir).resolve() / longest_name)) <= _MAX_SOCKET_PATH:
        return None
    return Path(tempfile.mkdtemp(prefix="kmg-"))


def kernel_image(guest_dir: Path, choice: str) -> Path:
    """The kernel to boot for :attr:`GuestSpec.kernel` ``choice`` (auto, vmlinux, vmlinuz)."""
    if choice == "auto":
        pvh = guest_dir / "vmlinux"
        return pvh if pvh.is_file() else guest_dir / "vmlinuz"
    if choice not in ("vmlinux", "vmlinuz"):
        raise ValueError(f"GuestSpec.kernel must be auto, vmlinux or vmlinuz, not {choice!r}")
    return guest_dir / choice


class GuestControl:
    """Client of the guest's ``ctl`` line protocol (one reply line per command).

    The guest's virtio-serial port ``ctl`` appears on the host as a unix socket
    (a QEMU chardev, or a libvirt ``<channel type='unix'>``). ``is_alive`` and
    ``console_tail`` come from the owner and only serve error messages and
    :meth:`wait_mem`; ``what`` names the owner's process in them.
    """

    def __init__(
        self,
        is_alive: Callable[[], bool],
        console_tail: Callable[[], str],
        what: str = "QEMU",
    ) -> None:
        self._is_alive = is_alive
        self._console_tail = console_tail
        self._what = what
        self._sock: Optional[socket.socket] = None
        self._buf = b""
        self._lock = threading.Lock()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self, path: Path, deadline: float) -> None:
        """Connect to ``path``, retrying until ``deadline`` (``time.monotonic()``).

        Raises :class:`GuestError` when the deadline passes.
        """
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                if time.monotonic() >= deadline:
                    raise GuestError(f"cannot connect to {path}: {exc}") from exc
                time.sleep(0.05)
                continue
            with self._lock:
                self.close()
                self._sock = sock
                self._buf = b""
            return

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def command(self, line: str, timeout: float = 30.0) -> str:
        """Send one command line on the ``ctl`` port and return the reply line."""
        if "\n" in line or not line.strip():
            raise ValueError(f"command must be a single non-empty line: {line!r}")
        with self._lock:
            sock = self._sock
            if sock is None:
                raise GuestError("not connected to the guest (not started or stopped)")
            deadline = time.monotonic() + timeout
            sock.settimeout(timeout)
            try:
                sock.sendall(line.encode() + b"\n")
                while b"\n" not in self._buf:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError
                    sock.settimeout(remaining)
                    chunk = sock.recv(4096)
                    if not chunk:
                        raise GuestError(
                            f"ctl connection closed during {line!r} ({self._what} alive: "
                            f"{self._is_alive()})\n{self._console_tail()}"
                        )
                    self._buf += chunk
            except TimeoutError:
                raise GuestError(
                    f"no reply to {line!r} within {timeout:.0f} s ({self._what} alive: "
                    f"{self._is_alive()})\n--- console tail ---\n{self._console_tail()}"
                ) from None
            reply, _, self._buf = self._buf.partition(b"\n")
            return reply.decode(errors="replace").strip()

    def status(self) -> GuestMem:
        return GuestMem.parse(self.command("status"))

    def alloc(self, mib: int, check: bool = True) -> str:
        """Pin ``mib`` MiB in the guest; returns ``OK alloc MIB held=TOTAL`` (or ``ERR ...``).

        With ``check`` (default) an ``ERR`` reply raises :class:`GuestError`.
        """
        return self._checked(self.command(f"alloc {int(mib)}", timeout=120.0), check)

    def free(self, check: bool = True) -> str:
        """Release everything :meth:`alloc` pinned; returns ``OK free``."""
        return self._checked(self.command("free", timeout=60.0), check)

    def online(self, state: str = "online_movable", check: bool = True) -> str:
        """Online offline memory blocks in the guest; returns ``OK online N/M``."""
        return self._checked(self.command(f"online {state}"), check)

    @staticmethod
    def _checked(reply: str, check: bool) -> str:
        if check and not reply.startswith("OK"):
            raise GuestError(f"guest answered: {reply}")
        return reply

    def wait_mem(
        self,
        predicate: Callable[[GuestMem], bool],
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> GuestMem:
        """Poll :meth:`status` until ``predicate`` holds; return that status.

        :raises TimeoutError: when it does not hold within ``timeout``. The status
            returned is always true: assert on its fields (``.total_kb == ...``),
            never on the call itself.
        """
        deadline = time.monotonic() + timeout
        last = self.status()
        while not predicate(last):
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"guest memory condition not met within {timeout} s; last {last}"
                )
            if not self._is_alive():
                raise GuestError(f"{self._what} exited; last {last}\n{self._console_tail()}")
            time.sleep(interval)
            last = self.status()
        return last


def wait_for_ready(
    console_log: Path,
    deadline: float,
    timeout: float,
    died: Callable[[], Optional[str]],
    failure: Callable[[str], GuestBootError],
    check_every: float = 0.0,
) -> None:
    """Wait until the console shows :data:`READY_MARKER`.

    ``died`` says why the VM is gone (or None); it is asked at most every
    ``check_every`` seconds. ``failure`` builds the error to raise.
    """
    pos = 0
    seen = b""
    marker = READY_MARKER.encode()
    next_check = 0.0
    while True:
        try:
            with open(console_log, "rb") as f:
                f.seek(pos)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        pos += len(chunk)
        seen = seen[-len(marker) :] + chunk
        if marker in seen:
            return
        now = time.monotonic()
        if now >= next_check:
            next_check = now + check_every
            reason = died()
            if reason is not None:
                raise failure(reason)
        if now >= deadline:
            raise failure(f"guest not ready within {timeout:.0f} s")
        time.sleep(0.1)


class GuestControlMixin:
    """The guest-control methods of a guest object, delegated to its :class:`GuestControl`."""

    _control: GuestControl

    def command(self, line: str, timeout: float = 30.0) -> str:
        """Send one command line on the ``ctl`` port and return the reply line."""
        return self._control.command(line, timeout)

    def status(self) -> GuestMem:
        return self._control.status()

    def alloc(self, mib: int, check: bool = True) -> str:
        """Pin ``mib`` MiB in the guest; returns ``OK alloc MIB held=TOTAL`` (or ``ERR ...``).

        With ``check`` (default) an ``ERR`` reply raises :class:`GuestError`.
        """
        return self._control.alloc(mib, check)

    def free(self, check: bool = True) -> str:
        """Release everything :meth:`alloc` pinned; returns ``OK free``."""
        return self._control.free(check)

    def online(self, state: str = "online_movable", check: bool = True) -> str:
        """Online offline memory blocks in the guest; returns ``OK online N/M``."""
        return self._control.online(state, check)

    def wait_mem(
        self,
        predicate: Callable[[GuestMem], bool],
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> GuestMem:
        """Poll :meth:`status` until ``predicate`` holds; return that status.

        :raises TimeoutError: when it does not hold within ``timeout``. The status
            returned is always true: assert on its fields (``.total_kb == ...``),
            never on the call itself.
        """
        return self._control.wait_mem(predicate, timeout, interval)


class GuestVM(GuestControlMixin):
    """A QEMU TCG process running the test guest. Use as a context manager."""

    def __init__(
        self,
        guest_dir: Path,
        workdir: Path,
        spec: GuestSpec,
        *,
        qemu_binary: Optional[str] = None,
    ) -> None:
        self.guest_dir = Path(guest_dir)
        self.workdir = Path(workdir)
        self.spec = spec
        self.qemu_binary = qemu_binary or os.environ.get("KATA_MEM_QEMU") or QEMU_BINARY
        self.initrd = self.guest_dir / "initramfs.gz"
        self._console_log = self.workdir / "console.log"
        self._qemu_log = self.workdir / "qemu.log"
        self._sock_dir: Optional[Path] = None  # short temp dir if workdir is too long
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._control = GuestControl(self.is_alive, self.console_tail, "QEMU")
        self.boot_seconds: Optional[float] = None

    # -- paths / properties -------------------------------------------------------
    def _socket_dir(self) -> Path:
        if self._sock_dir is None:
            self._sock_dir = socket_dir_for(self.workdir, "qmp.sock")
            if self._sock_dir is None:
                return self.workdir
        return self._sock_dir

    @property
    def kernel(self) -> Path:
        """The kernel image QEMU boots (see :attr:`GuestSpec.kernel`)."""
        return kernel_image(self.guest_dir, self.spec.kernel)

    @property
    def qmp_socket(self) -> Path:
        return self._socket_dir() / "qmp.sock"

    @property
    def ctl_socket(self) -> Path:
        return self._socket_dir() / "ctl.sock"

    @property
    def console_log(self) -> Path:
        return self._console_log

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise GuestError("guest not started")
        return self._proc.pid

    def console_tail(self, lines: int = 40) -> str:
        return _tail(self._console_log, lines)

    def qemu_argv(self) -> list[str]:
        """The QEMU command line for :attr:`spec`."""
        s = self.spec
        # no_timer_check: under TCG on a loaded machine the kernel's check that the timer
        # reaches the IO-APIC can time out and panic the boot ("IO-APIC + timer doesn't work",
        # arch/x86/kernel/apic/io_apic.c, timer_irq_works); the check is for real boards.
        append = ["console=ttyS0", "quiet", "panic=-1", "no_timer_check"]
        if s.online_state:
            append.append(f"memhp_default_state={s.online_state}")
        append.extend(s.kernel_args)
        argv = [
            self.qemu_binary,
            "-machine", "q35",
            "-accel", "tcg",
            "-smp", str(s.cpus),
            "-m", f"{s.base_mib}M,slots={s.slots},maxmem={s.maxmem_mib}M",
            "-nodefaults", "-nographic", "-display", "none", "-no-reboot",
            "-kernel", str(self.kernel),
            "-initrd", str(self.initrd),
            "-append", " ".join(append),
            "-serial", f"file:{self._console_log}",
            "-qmp", f"unix:{_opt(self.qmp_socket)},server=on,wait=off",
            "-chardev", f"socket,id=ctl,path={_opt(self.ctl_socket)},server=on,wait=off",
            "-device", "virtio-serial-pci",
            "-device", "virtserialport,chardev=ctl,name=ctl",
        ]  # fmt: skip
        if s.virtio_mem_mib > 0:
            argv += [
                "-object", f"memory-backend-ram,id=vmem0mem,size={s.virtio_mem_mib}M",
                "-device", "pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1",
                "-device",
                "virtio-mem-pci,id=vm0,memdev=vmem0mem,requested-size=0,"
                f"block-size={s.virtio_mem_block_mib}M,bus=rp1",
            ]  # fmt: skip
        if s.balloon:
            argv += ["-device", "virtio-balloon-pci,id=balloon0"]
        argv += list(s.extra_qemu_args)
        return argv

    # -- lifecycle ----------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> GuestVM:
        """Spawn QEMU and wait for the guest's ready marker, then connect to ``ctl``."""
        if self._proc is not None:
            raise GuestError("guest already started")
        for f in (self.kernel, self.initrd):
            if not f.is_file():
                raise GuestBootError(f"{f} missing: run scripts/build-guest.sh {self.guest_dir}")
        if shutil.which(self.qemu_binary) is None:
            raise GuestBootError(
                f"{self.qemu_binary} not found: run scripts/install-system-deps.sh (as root)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        for p in (self._console_log, self.qmp_socket, self.ctl_socket):
            p.unlink(missing_ok=True)

        t0 = time.monotonic()
        with open(self._qemu_log, "wb") as qemu_log:
            self._proc = subprocess.Popen(
                [*_death_signal_prefix(), *self.qemu_argv()],
                stdin=subprocess.DEVNULL,
                stdout=qemu_log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                # Same process group as the test run: a Ctrl-C or a group kill
                # reaches QEMU too.
            )
        _live.add(self)
        try:
            self._wait_ready(t0 + timeout, timeout)
            self._connect_ctl(t0 + timeout)
        except BaseException:
            self.stop()
            raise
        self.boot_seconds = time.monotonic() - t0
        return self

    def _boot_failure(self, what: str) -> GuestBootError:
        return GuestBootError(
            f"{what}\n--- qemu output ({self._qemu_log}) ---\n{_tail(self._qemu_log, 20)}"
            f"\n--- console tail ({self._console_log}) ---\n{self.console_tail()}"
        )

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        assert self._proc is not None
        proc = self._proc

        def died() -> Optional[str]:
            rc = proc.poll()
            return (
                None if rc is None else f"QEMU exited with status {rc} before the guest was ready"
            )

        wait_for_ready(self._console_log, deadline, timeout, died, self._boot_failure)

    def _connect_ctl(self, deadline: float) -> None:
        try:
            self._control.connect(self.ctl_socket, deadline)
        except GuestError as exc:
            raise self._boot_failure(str(exc)) from exc

    def stop(self, term_timeout: float = 5.0) -> None:
        """Stop QEMU (SIGTERM, then SIGKILL) and remove the sockets. Idempotent."""
        self._control.close()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=term_timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
        for p in (self.qmp_socket, self.ctl_socket):
            with contextlib.suppress(OSError):
                p.unlink(missing_ok=True)
        if self._sock_dir is not None:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
        _live.discard(self)

    def is_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait for QEMU to exit by itself; return its exit status."""
        if self._proc is None:
            raise GuestError("guest not started")
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GuestError(f"QEMU still running after {timeout:.0f} s") from None

    def __enter__(self) -> GuestVM:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()

    # -- guest control (command/status/alloc/free/online/wait_mem: GuestControlMixin) --
    def poweroff(self, timeout: float = 30.0) -> int:
        """Power the guest off (``poweroff -f``) and wait for QEMU to exit."""
        self.command("poweroff")
        rc = self.wait_exit(timeout)
        self.stop()
        return rc
