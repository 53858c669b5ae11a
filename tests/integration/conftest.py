"""Fixtures for tests that boot the real tiny guest under QEMU TCG.

* ``guest_dir`` (session, in ``tests/conftest.py``: the service tests boot guests too):
  the guest kernel + initramfs.
* ``boot_guest`` (function): ``boot_guest(spec=GuestSpec()) -> GuestVM``, booted
  under the test's ``tmp_path``; every guest it booted is stopped at teardown.
* ``libvirtd`` (session): a real libvirtd serving ``qemu:///system`` (its URI), from
  ``scripts/libvirtd.sh start``. Started only if nothing serves the URI yet (CI may
  start it around pytest); stopped at the end only if a pytest session started it
  and no other pytest session still uses it (lease files in the script's run dir).
  Failing to start it is a test failure, not a skip.
* ``boot_libvirt_guest`` (function): ``boot_libvirt_guest(spec=GuestSpec()) ->
  LibvirtGuest``, a libvirt domain per call; all are destroyed and undefined at teardown.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.guestvm import GuestSpec, GuestVM
from tests.support.libvirt_guest import DEFAULT_URI, LibvirtGuest
from tests.support.paths import REPO

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.guestvm import BootGuest
    from tests.support.libvirt_guest import BootLibvirtGuest

LIBVIRTD_SCRIPT = REPO / "scripts" / "libvirtd.sh"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "guest: boots a real QEMU guest under TCG")
    config.addinivalue_line(
        "markers", "libvirt: needs a real libvirtd (the libvirtd fixture starts one)"
    )


@pytest.fixture
def boot_guest(guest_dir: Path, tmp_path: Path) -> Iterator[BootGuest]:
    """Factory: boot a guest per call; all are stopped when the test ends."""
    booted: list[GuestVM] = []

    def boot(spec: GuestSpec = GuestSpec()) -> GuestVM:  # noqa: B008 (frozen dataclass)
        vm = GuestVM(guest_dir, tmp_path / f"guest{len(booted)}", spec)
        booted.append(vm)
        return vm.start()

    try:
        yield boot
    finally:
        for vm in reversed(booted):
            vm.stop()


def _libvirtd_script(action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LIBVIRTD_SCRIPT), action],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _run_dir_lock(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "pytest.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def libvirtd() -> Iterator[str]:
    """A libvirtd serving ``qemu:///system``; yields that URI.

    ``scripts/libvirtd.sh start`` is idempotent and harmless when CI started the
    daemon already. Several pytest sessions may share one daemon: each holds a lease
    file ``pytest-session.<pid>``; the last session to leave stops the daemon, and
    only when a pytest session started it (marker ``pytest-started``).
    """
    if shutil.which("virsh") is None or shutil.which("libvirtd") is None:
        pytest.fail(
            "virsh/libvirtd not found: the libvirt tests need a real libvirtd. "
            "Run `sudo scripts/install-system-deps.sh libvirt` first.",
            pytrace=False,
        )
    run_dir = Path(os.environ.get("KATA_MEM_LIBVIRT_RUN") or "/run/kata-mem-test")
    lease = run_dir / f"pytest-session.{os.getpid()}"
    started_marker = run_dir / "pytest-started"
    with _run_dir_lock(run_dir):
        if _libvirtd_script("status").returncode != 0:
            t0 = time.monotonic()
            proc = _libvirtd_script("start")
            if proc.returncode != 0:
                pytest.fail(
                    f"{LIBVIRTD_SCRIPT.relative_to(REPO)} start failed (exit {proc.returncode})"
                    f"\n--- stderr ---\n{proc.stderr[-4000:]}",
                    pytrace=False,
                )
            started_marker.touch()
            print(f"\nstarted libvirtd ({time.monotonic() - t0:.1f} s)")
        lease.touch()
    try:
        yield DEFAULT_URI
    finally:
        with _run_dir_lock(run_dir):
            lease.unlink(missing_ok=True)
            others = []
            for other in run_dir.glob("pytest-session.*"):
                pid = other.suffix[1:]
                if pid.isdigit() and _pid_alive(int(pid)):
                    others.append(other)
                else:  # left by a killed session
                    other.unlink(missing_ok=True)
            if not others and started_marker.exists():
                _libvirtd_script("stop")
                started_marker.unlink(missing_ok=True)


@pytest.fixture
def boot_libvirt_guest(
    libvirtd: str, guest_dir: Path, tmp_path: Path
) -> Iterator[BootLibvirtGuest]:
    """Factory: a libvirt domain per call; all are destroyed and undefined at teardown."""
    booted: list[LibvirtGuest] = []

    def boot(spec: GuestSpec = GuestSpec()) -> LibvirtGuest:  # noqa: B008 (frozen dataclass)
        guest = LibvirtGuest(guest_dir, tmp_path / f"libvirt{len(booted)}", spec, uri=libvirtd)
        booted.append(guest)
        return guest.start()

    try:
        yield boot
    finally:
        for guest in reversed(booted):
            guest.stop()
