"""The memory behind each DIMM kata-mem hot-adds (kata_mem.core.backing ``dimm_backend``),
as Kata's runtimes back their own: the Go runtime's qemu.go ``getMemArgs`` and runtime-rs's
qmp.rs ``hotplug_pc_dimm`` (kata-containers 7c6ba40c), from configurations read by the
real loader."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Optional

import pytest

from kata_mem.core.backing import MemoryBackend, dimm_backend
from kata_mem.edges.config import load_config
from tests.support.configs import write_config
from tests.support.paths import KATA_CONFIGS

SHM = ("file", "/dev/shm", True)
RAM = ("ram", "", False)


def _backend(
    tmp_path: Path, hypervisor: dict[str, Any], kata_mem: Optional[dict[str, Any]] = None
) -> MemoryBackend:
    return dimm_backend(
        load_config(write_config(tmp_path / "c.toml", hypervisor, kata_mem=kata_mem))
    )


@pytest.mark.parametrize(
    ("hypervisor", "kata_mem", "expected"),
    [
        # Go: unset shared_fs is virtio-fs, Kata's default: virtiofsd maps the memory.
        ({}, None, SHM),
        ({"shared_fs": "virtio-fs"}, None, SHM),
        ({"shared_fs": "virtio-fs-nydus"}, None, SHM),
        ({"shared_fs": ""}, None, SHM),
        # Go: no vhost-user daemon maps guest memory: private RAM, as getMemArgs.
        ({"shared_fs": "virtio-9p"}, None, RAM),
        ({"shared_fs": "none"}, None, RAM),
        # Go: hugepages first, whatever the file system; the mount is kata-mem's setting.
        ({"enable_hugepages": True, "shared_fs": "none"}, None, ("file", "/dev/hugepages", True)),
        ({"enable_hugepages": True}, {"hugepages_path": "/mnt/huge"}, ("file", "/mnt/huge", True)),
        # Go before Kata 3.32: file_mem_backend, shared, over /dev/shm and over virtio-9p.
        ({"file_mem_backend": "/var/lib/kata-mem"}, None, ("file", "/var/lib/kata-mem", True)),
        (
            {"file_mem_backend": "/var/lib/kata-mem", "shared_fs": "virtio-9p"},
            None,
            ("file", "/var/lib/kata-mem", True),
        ),
        ({"file_mem_backend": "", "shared_fs": "virtio-9p"}, None, RAM),
        # runtime-rs: always a shared file in /dev/shm (hotplug_pc_dimm).
        ({}, {"runtime": "runtime-rs"}, SHM),
        ({"shared_fs": "none"}, {"runtime": "runtime-rs"}, SHM),
        ({"enable_hugepages": True}, {"runtime": "runtime-rs"}, SHM),
        ({"file_mem_backend": "/var/lib/kata-mem"}, {"runtime": "runtime-rs"}, SHM),
    ],
)
def test_each_configuration_gets_the_backend_its_runtime_gives(
    tmp_path: Path,
    hypervisor: dict[str, Any],
    kata_mem: Optional[dict[str, Any]],
    expected: tuple[str, str, bool],
) -> None:
    got = _backend(tmp_path, hypervisor, kata_mem)
    assert (got.kind, got.mem_path, got.share) == expected
    assert got.why  # config check says which rule chose it


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("configuration-qemu.toml", SHM),
        ("configuration-qemu-snp.toml", RAM),
        ("configuration-qemu-runtime-rs.toml", SHM),
    ],
)
def test_kata_s_packaged_qemu_files(
    tmp_path: Path, name: str, expected: tuple[str, str, bool]
) -> None:
    copy = tmp_path / name
    shutil.copy(KATA_CONFIGS / name, copy)
    got = dimm_backend(load_config(copy))
    assert (got.kind, got.mem_path, got.share) == expected


@pytest.mark.parametrize(
    ("backend", "said"),
    [
        (
            MemoryBackend("file", "/dev/shm", share=True),
            "memory-backend-file mem-path=/dev/shm share=on",
        ),
        (MemoryBackend("ram"), "memory-backend-ram"),
    ],
)
def test_a_backend_is_described_as_qemu_spells_it(backend: MemoryBackend, said: str) -> None:
    assert backend.describe() == said
