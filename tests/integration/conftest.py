"""Fixtures for tests that boot the real tiny guest under QEMU TCG.

* ``guest_dir`` (session): builds (or reuses) the guest kernel + initramfs with
  ``scripts/build-guest.sh`` into ``$KATA_MEM_GUEST_DIR`` (default
  ``<repo>/.cache/guest``). Missing QEMU is a failure, not a skip.
* ``boot_guest`` (function): ``boot_guest(spec=GuestSpec()) -> GuestVM``, booted
  under the test's ``tmp_path``; every guest it booted is stopped at teardown.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.guestvm import QEMU_BINARY, GuestSpec, GuestVM

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.guestvm import BootGuest

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-guest.sh"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "guest: boots a real QEMU guest under TCG")


@pytest.fixture(scope="session")
def guest_dir() -> Path:
    """Directory with ``vmlinuz`` and ``initramfs.gz`` of the test guest."""
    qemu = os.environ.get("KATA_MEM_QEMU") or QEMU_BINARY
    if shutil.which(qemu) is None:
        pytest.fail(
            f"{qemu} not found: the guest tests need QEMU. "
            "Run `sudo scripts/install-system-deps.sh` first.",
            pytrace=False,
        )
    out = Path(os.environ.get("KATA_MEM_GUEST_DIR") or REPO / ".cache" / "guest")
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(BUILD_SCRIPT), str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{BUILD_SCRIPT.relative_to(REPO)} {out} failed (exit {proc.returncode}); "
            "missing tools? run `sudo scripts/install-system-deps.sh`\n"
            f"--- stderr ---\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    elapsed = time.monotonic() - t0
    if elapsed > 1.0:
        print(f"\nbuilt test guest in {out} ({elapsed:.1f} s)")
    return out


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
