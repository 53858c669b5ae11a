"""Kata configurations for the tests, written as files that the real loader reads, and
the host the tests plan for."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from kata_mem.core.model import HostFacts
from kata_mem.core.quantity import format_quantity
from kata_mem.core.units import GiB

#: The host the tests plan for unless they say otherwise, so that no plan depends on the
#: machine: as host facts, and as the command-line options that give the same host.
HOST = HostFacts(memory=16 * GiB, cpus=4, arch="amd64")
HOST_ARGS = (
    *("--host-memory", format_quantity(Fraction(HOST.memory))),
    *("--host-cpus", str(HOST.cpus)),
    *("--host-arch", HOST.arch),
)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def write_config(
    path: Path,
    hypervisor: Mapping[str, Any] | None = None,
    runtime: Mapping[str, Any] | None = None,
    kata_mem: Mapping[str, Any] | None = None,
    name: str = "qemu",
) -> Path:
    """A minimal Kata configuration with the given sizing keys (unset: Kata defaults)."""
    lines = [f"[hypervisor.{name}]", 'path = "/usr/bin/qemu-system-x86_64"']
    lines += [f"{k} = {toml_value(v)}" for k, v in (hypervisor or {}).items()]
    if runtime:
        lines += ["[runtime]", *(f"{k} = {toml_value(v)}" for k, v in runtime.items())]
    if kata_mem:
        lines += ["[kata_mem]", *(f"{k} = {toml_value(v)}" for k, v in kata_mem.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


#: How the tests' guests online hot-added memory (tests/support/guestvm.py ``GuestSpec``,
#: libvirt_guest.py: ``memhp_default_state=online_movable`` on their kernel's command line),
#: said in the Kata configuration as Kata passes it to the guest (``kernel_params``), so that
#: kata-mem's model of the guest is the guest's.
GUEST_KERNEL_PARAMS = "memhp_default_state=online_movable"


def guest_config(
    tmp_path: Path,
    *,
    virtio: bool,
    maxmem: int = 4096,
    slots: int = 8,
    timeout: int = 20,
    kernel_params: str = GUEST_KERNEL_PARAMS,
    **kata_mem: Any,
) -> Path:
    """The configuration of the tests' guest: 512 MiB at boot, state under ``tmp_path``,
    its onlining in ``kernel_params`` (``""``: unsaid, as in Kata's own configuration);
    ``kata_mem`` adds ``[kata_mem]`` settings."""
    return write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": maxmem,
            "memory_slots": slots,
            "enable_virtio_mem": virtio,
            "kernel_params": kernel_params,
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": timeout, **kata_mem},
    )


def small_vm_config(tmp_path: Path, step_timeout_s: int = 5) -> Path:
    """The configuration of a sandbox on the fake QMP server: 512 MiB at boot, at most
    4096 MiB in 4 DIMM slots, its guest onlining movable as the tests' guests do."""
    return write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 4,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"step_timeout_s": step_timeout_s},
    )
