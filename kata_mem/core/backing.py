"""The memory behind a DIMM kata-mem hot-adds to QEMU (:class:`MemoryBackend`), decided
once, as Kata's runtime decides it for its own DIMMs (:func:`dimm_backend`). Pure.

Why it matters: Kata's VMs share a directory with the host through virtio-fs by default,
served by virtiofsd, a vhost-user daemon that reads and writes the guest's buffers in
guest memory itself. QEMU hands a vhost-user daemon only the memory regions that have a
file descriptor: a region without one is left out of ``VHOST_USER_SET_MEM_TABLE`` and
never sent with ``VHOST_USER_ADD_MEM_REG`` (QEMU 7.2 hw/virtio/vhost-user.c,
``vhost_user_fill_set_mem_table_msg``, ``send_add_regions``). A ``memory-backend-ram``
DIMM is private anonymous memory, without one: the guest puts page cache and I/O buffers
in it like in any other memory, and virtiofsd cannot reach them. A DIMM backed by a
shared file (``memory-backend-file``, ``share=on``) has one, and virtiofsd maps it.
"""

from __future__ import annotations

from typing import Literal

from kata_mem.core.model import SizingConfig
from kata_mem.core.values import Frozen

#: QEMU's memory backend types for a DIMM: ``memory-backend-ram`` (private anonymous
#: memory) or ``memory-backend-file`` (a file in ``mem_path``).
MemoryKind = Literal["ram", "file"]

#: Where Kata keeps the guest's memory when it shares it with virtiofsd: Go
#: src/runtime/virtcontainers/qemu.go ``fallbackFileBackedMemDir``; runtime-rs
#: src/runtime-rs/crates/hypervisor/src/qemu/qmp.rs ``hotplug_pc_dimm``, ``mem_path``.
SHM_DIR = "/dev/shm"
#: The ``shared_fs`` values that run virtiofsd, for which the Go runtime backs memory with
#: shared files (qemu.go ``getMemArgs``: ``config.VirtioFS``, ``config.VirtioFSNydus``).
VIRTIO_FS = ("virtio-fs", "virtio-fs-nydus")


class MemoryBackend(Frozen):
    """The QEMU memory backend object a new DIMM gets: its kind, the directory of a file
    backend (QEMU creates a file there and unlinks it at once: softmmu/physmem.c
    ``file_ram_open``), whether it is mapped shared, and the rule that chose it, naming
    Kata's code (for ``config check``)."""

    kind: MemoryKind
    mem_path: str = ""
    share: bool = False
    why: str = ""

    @property
    def qom_type(self) -> str:
        return f"memory-backend-{self.kind}"

    def describe(self) -> str:
        """As QEMU's options spell it: ``memory-backend-file mem-path=/dev/shm share=on``."""
        parts = [self.qom_type]
        if self.kind == "file":
            parts.append(f"mem-path={self.mem_path}")
        if self.share:
            parts.append("share=on")
        return " ".join(parts)


def dimm_backend(cfg: SizingConfig) -> MemoryBackend:
    """The memory backend of every DIMM kata-mem adds to a VM of ``cfg`` (with the pod's
    annotations applied), as the configuration's runtime backs its own:

    - runtime-rs: always a shared file in /dev/shm (qmp.rs ``hotplug_pc_dimm``:
      ``memory_backend_file``, ``mem_path: "/dev/shm"``, ``share: Some(true)``, whatever
      ``shared_fs`` or ``enable_hugepages``; its QEMU reads neither for memory);
    - the Go runtime (qemu.go ``getMemArgs``, called by ``hotplugAddMemory``): with
      ``enable_hugepages``, a shared file on the hugetlbfs mount (Kata's
      /dev/hugepages; kata-mem's ``hugepages_path``); else, before Kata 3.32, a
      ``file_mem_backend`` directory, shared (``setupFileBackedMem`` sets ``MemShared``);
      else with ``shared_fs`` virtio-fs or virtio-fs-nydus a shared file in the VM's
      memory path, /dev/shm (``setupFileBackedMem``); else private RAM (virtio-9p, none).
    """
    if cfg.runtime == "runtime-rs":
        return MemoryBackend(
            "file",
            SHM_DIR,
            share=True,
            why="runtime-rs backs every hot-added DIMM with a shared file in /dev/shm "
            "(src/runtime-rs/crates/hypervisor/src/qemu/qmp.rs hotplug_pc_dimm)",
        )
    go = "as the Go runtime backs its own DIMMs (src/runtime/virtcontainers/qemu.go getMemArgs)"
    if cfg.enable_hugepages:
        return MemoryBackend(
            "file",
            cfg.settings.hugepages_path,
            share=True,
            why="enable_hugepages: a shared file on the hugetlbfs mount ([kata_mem] "
            f"hugepages_path), {go}",
        )
    if cfg.file_mem_backend:
        return MemoryBackend(
            "file",
            cfg.file_mem_backend,
            share=True,
            why=f"file_mem_backend: a shared file there, {go} before Kata 3.32",
        )
    if cfg.shared_fs in VIRTIO_FS:
        return MemoryBackend(
            "file",
            SHM_DIR,
            share=True,
            why=f"shared_fs {cfg.shared_fs}: virtiofsd maps the guest's memory, so a shared "
            f"file in /dev/shm, {go}",
        )
    return MemoryBackend(
        "ram",
        why=f"shared_fs {cfg.shared_fs}: no vhost-user daemon maps the guest's memory, so "
        f"private RAM, {go}",
    )
