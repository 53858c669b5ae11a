"""The host probe reads /proc/meminfo's hugepage pool and MemAvailable, and only those."""

from __future__ import annotations

from pathlib import Path

from kata_mem.core.units import KiB
from kata_mem.edges.host import mem_available, probe_host

# The kernel's layout (fs/proc/meminfo.c, meminfo_proc_show): "Key:" padded, a number,
# " kB" for sizes; counts have no unit. The last line here has no newline.
MEMINFO = (
    "MemTotal:       32768000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:   20000000 kB\n"
    "HugePages_Total:      64\n"
    "HugePages_Free:       40\n"
    "HugePages_Rsvd:        3\n"
    "Hugepagesize:       2048 kB"
)


def _proc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "meminfo").write_text(text)
    return tmp_path


def test_hugepage_pool_and_available_memory(tmp_path: Path) -> None:
    proc = _proc(tmp_path, MEMINFO)
    host = probe_host(memory=1 << 30, cpus=2, arch="amd64", proc=proc)
    assert (host.hugepage_size, host.hugepages_total, host.hugepages_free) == (2048 * KiB, 64, 40)
    assert mem_available(proc) == 20000000 * KiB


def test_a_key_that_only_ends_another_is_not_read(tmp_path: Path) -> None:
    # "HugePages_Free" is not found inside "XHugePages_Free", nor taken from a value.
    proc = _proc(tmp_path, "XHugePages_Free: 9\nMemAvailable: HugePages_Free: 7\n")
    host = probe_host(memory=1 << 30, cpus=2, arch="amd64", proc=proc)
    assert host.hugepages_free == 0
    assert mem_available(proc) is None


def test_no_meminfo_is_no_hugepages(tmp_path: Path) -> None:
    host = probe_host(memory=1 << 30, cpus=2, arch="amd64", proc=tmp_path)
    assert (host.hugepage_size, host.hugepages_total, host.hugepages_free) == (0, 0, 0)
    assert mem_available(tmp_path) is None


def test_given_hugepages_do_not_read_meminfo(tmp_path: Path) -> None:
    # A directory where the file should be: reading it fails; nothing tries.
    (tmp_path / "meminfo").mkdir()
    host = probe_host(memory=1 << 30, cpus=2, arch="amd64", hugepages=(8, 2 << 20), proc=tmp_path)
    assert (host.hugepages_total, host.hugepages_free) == (8, 8)
