"""Probe the host: MemTotal and CPUs (psutil), architecture, hugepage pool, and
optionally a memory cgroup limit (v1 or v2). Every fact can be overridden so previews
are reproducible on any machine.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Optional, Union

from kata_mem.core.arch import check_hugepages, normalize_arch
from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.model import Arch, HostFacts, Origin
from kata_mem.core.units import KiB, MiB, align_down


def _meminfo(proc: Union[str, Path], keys: tuple[str, ...]) -> dict[str, int]:
    """The ``keys`` of ``/proc/meminfo`` that it has, in bytes (kB lines) or counts.

    Only those lines are parsed: the plan-only answer reads the hugepage pool on every
    request, and parsing all ~55 lines was a third of its planning (175 us against 35 us:
    docs/benchmarks.md, "Node service", ``scripts/bench_service.py``)."""
    try:
        fd = os.open(f"{proc}/meminfo", os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = [b"\n"]
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
                if len(chunk) < 1 << 16:
                    # A short read is the end: a regular file's, and a /proc file's, whose
                    # reads fill the buffer until the text ends (fs/seq_file.c
                    # seq_read_iter). One read a request, not two.
                    break
        finally:
            os.close(fd)
        data = b"".join(chunks)
    except OSError:
        return {}
    # Searched as bytes, never decoded: only ASCII digits count (bytes.isdigit).
    out: dict[str, int] = {}
    for key in keys:
        tag = f"\n{key}:".encode()
        at = data.find(tag)
        if at < 0:
            continue
        end = data.find(b"\n", at + 1)
        parts = data[at + len(tag) : end if end >= 0 else None].split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (KiB if len(parts) > 1 and parts[1] == b"kB" else 1)
    return out


def mem_available(proc: Path = Path("/proc")) -> Optional[int]:
    """The host's MemAvailable now (bytes; ``None`` when /proc does not say)."""
    return _meminfo(proc, ("MemAvailable",)).get("MemAvailable")


def read_cgroup_memory_limit(cgroup_dir: str, origin: Origin) -> tuple[Optional[int], str]:
    """The effective memory limit of a cgroup directory, v1 or v2 (the smallest along
    its ancestors up to the mount root; ``None`` when unlimited), and where it was read:
    the limit file of the level that binds.

    ``origin`` says where the directory came from (the configuration key, or a
    command-line flag such as ``--cgroup``), so that the error points at what the
    user wrote; a flag's value is bad input, a key's a configuration error.

    :raises ConfigError: (``InputError`` for a value given in the call) when the
        directory is not a memory cgroup, or a limit on the way up cannot be read or parsed.
    """
    from kata_mem.edges.cgroups import FILES, CgroupUnreadable, cgroup_of_dir

    try:
        cgroup = cgroup_of_dir(cgroup_dir, origin.name())
    except CgroupUnreadable as exc:
        raise (InputError if origin.given_by_user else ConfigError)(str(exc)) from exc
    limit_file = FILES[cgroup.version][0]
    where = f"cgroup v{cgroup.version} {limit_file} from {cgroup.path} up to the root"
    if cgroup.limit is None:
        return None, f"{where}: no limit"
    binding = min(cgroup.levels, key=lambda level: level.limit)
    return cgroup.limit, f"{where}: {binding.path}/{limit_file}, floored to MiB"


def machine_arch() -> Arch:
    """This machine's architecture, as its Go name.

    :raises InputError: an architecture Kata does not support.
    """
    return _probed_arch()[0]


@cache
def _probed_arch() -> tuple[Arch, Origin]:
    """This machine's architecture and where it was read: once a process (a machine does
    not change it while a process runs; ``kata-mem serve`` probes on every request). An
    unsupported one raises each time, and is never kept."""
    machine = os.uname().machine
    arch = normalize_arch(machine, "this machine's architecture (uname -m; pass --host-arch)")
    return arch, Origin("probe", f"uname machine = {machine}")


#: Where ``[kata_mem] host_memory_cgroup`` is set, when no file is known.
_CONFIGURED_CGROUP = Origin("file", key="[kata_mem] host_memory_cgroup")
#: Where the facts of a probe came from (Origins are immutable: one of each is shared).
_GIVEN = Origin("override")
_MEMTOTAL = Origin("probe", "psutil (MemTotal), floored to MiB")
_ONLINE_CPUS = Origin("probe", "psutil (online CPUs)")
_FLOORED = Origin("override", note="floored to MiB")
_PROC_MEMINFO = Origin("probe", "/proc/meminfo")


def probe_host(
    *,
    memory: Optional[int] = None,
    cpus: Optional[int] = None,
    arch: Optional[str] = None,
    hugepages: Optional[tuple[int, int]] = None,
    cgroup_dir: str = "",
    cgroup_origin: Origin = _CONFIGURED_CGROUP,
    proc: Union[str, Path] = "/proc",
) -> HostFacts:
    """Host facts, each from its override when given, else from the machine.

    Memory is whole MiB, probed or given (MemTotal, an override, a cgroup limit: each
    floored), so that every size a plan derives from it is whole MiB too. ``arch`` may
    be a ``uname -m`` or Go name; ``hugepages`` is (count, page size in bytes), a
    hugepage size of the architecture (:func:`check_hugepages`).

    :raises ConfigError: when ``cgroup_dir`` is set but is not a usable memory cgroup directory.
    :raises InputError: an unknown architecture (given, or this machine's), or a
        hugepage size the architecture does not have.
    """
    sources: list[tuple[str, Origin]] = []
    if memory is None:
        import psutil

        # Kata reads sysinfo totalram, the same number as MemTotal, in whole MiB.
        memory = align_down(int(psutil.virtual_memory().total), MiB)
        sources.append(("memory", _MEMTOTAL))
    else:
        floored = align_down(memory, MiB)
        sources.append(("memory", _GIVEN if floored == memory else _FLOORED))
        memory = floored
    if cpus is None:
        import psutil

        cpus = int(psutil.cpu_count(logical=True) or 1)
        sources.append(("cpus", _ONLINE_CPUS))
    else:
        sources.append(("cpus", _GIVEN))
    if arch is None:
        go_arch, probed = _probed_arch()
        sources.append(("arch", probed))
    else:
        go_arch = normalize_arch(arch, "host arch")
        sources.append(("arch", _GIVEN))
    if hugepages is None:
        info = _meminfo(proc, ("Hugepagesize", "HugePages_Total", "HugePages_Free"))
        page_size, pages = info.get("Hugepagesize", 0), info.get("HugePages_Total", 0)
        free = info.get("HugePages_Free", 0)
        read = _PROC_MEMINFO if proc == "/proc" else Origin("probe", f"{proc}/meminfo")
        sources.append(("hugepages", read))
    else:
        pages, page_size = check_hugepages(
            *hugepages, "host hugepages (--host-hugepages, request host.hugepages)", go_arch
        )
        free = pages
        sources.append(("hugepages", _GIVEN))
    limit = None
    if cgroup_dir:
        limit, where = read_cgroup_memory_limit(cgroup_dir, cgroup_origin)
        sources.append(("cgroup_memory_limit", Origin("probe", where)))
    return HostFacts(
        memory=memory,
        cpus=cpus,
        arch=go_arch,
        hugepage_size=page_size,
        hugepages_total=pages,
        hugepages_free=free,
        cgroup_memory_limit=None if limit is None else align_down(limit, MiB),
        cgroup_path=cgroup_dir,
        sources=tuple(sources),
    )
