"""The guest's own ceiling: how much hot-added memory its kernel can describe.

Pure: from the configuration, the architecture and the VM (and, on ``apply``, a fresh
reading of the guest's MemAvailable) to a :class:`GuestCeiling` the planner clamps to
(cause ``guest_memmap``, docs "Sizing rules", "The guest's own ceiling").

The facts, each from the kernel's or Kata's own sources:

* Linux describes every page of memory it adds with a ``struct page`` (64 bytes on the
  64-bit architectures Kata builds for, include/linux/mm_types.h), allocated when the
  memory is *added*, before it is onlined (mm/memory_hotplug.c ``add_memory_resource``
  -> ``arch_add_memory`` -> sparse ``section_activate``), from memory already online.
  On a 4 KiB-page kernel that is 1/64 of what is added: 16 MiB per GiB.
* The memmap is an unmovable kernel allocation: it cannot come from ZONE_MOVABLE
  (Documentation/admin-guide/mm/memory-hotplug.rst, "ZONE_MOVABLE": "Most kernel
  allocations are unmovable. Important examples include the memory map (usually 1/64ths
  of memory) ... Such allocations can only be served from the kernel zones"; "Ratios of
  63:1 are definitely impossible due to the overhead for the memory map"). So with
  hot-added memory onlined movable, every hot-add is paid from the boot memory; onlined
  to a kernel zone, added memory can pay for the next hot-add.
* ``memory_hotplug.memmap_on_memory`` puts the memmap inside the added memory, but only
  where ``mhp_supports_memmap_on_memory`` agrees (mm/memory_hotplug.c): up to Linux 6.7 only
  for a range of exactly one memory block (``size == memory_block_size_bytes()``), so
  a DIMM of several blocks is paid from the kernel zones anyway; and virtio-mem adds its
  memory without ``MHP_MEMMAP_ON_MEMORY`` (drivers/virtio/virtio_mem.c
  ``virtio_mem_add_memory``). kata-mem therefore counts on it only where the operator
  says the guest kernel does it for DIMMs (``[kata_mem] guest_memmap_on_memory``).
* Kata's guests online hot-added memory to a kernel zone: its kernel is built with
  ``CONFIG_MEMORY_HOTPLUG_DEFAULT_ONLINE=y`` (tools/packaging/kernel/configs/fragments/
  common/hotplug.conf) and its agent writes ``1`` to each new block's ``online`` file
  (src/agent/src/sandbox.rs ``online_memory``, uevent.rs), which lets the kernel choose
  the zone (ZONE_NORMAL under the default ``contig-zones`` policy). Kata guards the
  rest with a heuristic: at most 48x the guest memory per ACPI hot-add
  (src/runtime/virtcontainers/sandbox.go ``acpiMemoryHotplugFactor``, Kata #4847,
  PR #4862: "needing 64 bytes per 4KiB page ... 75% of available memory"); guests
  killed by large hot-adds: kata-containers/runtime #1244 and #2872.

kata-mem's safe default is movable onlining (the smaller ceiling) unless Kata's
``kernel_params`` or ``[kata_mem] guest_onlining`` says otherwise.
"""

from __future__ import annotations

from typing import Optional

from kata_mem.core.model import Arch, GuestCeiling, GuestPolicy, Mechanism, Onlining, Settings
from kata_mem.core.units import GiB, KiB, MiB, align_down, align_up, fmt_bytes, to_kib_floor

#: The base page size of the kernels Kata builds, by architecture: 4 KiB, except ppc64le:
#: 64 KiB, the kernel's default page size for Book3S 64 (arch/powerpc/Kconfig, "Page
#: size"), which Kata's powerpc fragments (tools/packaging/kernel/configs/fragments/
#: powerpc/) leave as it is.
PAGE_SIZE: dict[Arch, int] = {
    "amd64": 4 * KiB,
    "arm64": 4 * KiB,
    "ppc64le": 64 * KiB,
    "s390x": 4 * KiB,
    "riscv64": 4 * KiB,
}
#: ``sizeof(struct page)`` on every 64-bit architecture above (include/linux/mm_types.h:
#: the layout is kept to 8 words; 80 bytes only with debug options Kata does not set).
STRUCT_PAGE = 64
#: The share of a guest's kernel-zone memory taken to be available when no reading says
#: it (a preview): Kata's own assumption for an unloaded guest (sandbox.go, the comment
#: on ``acpiMemoryHotplugFactor``: "75% of available memory").
AVAILABLE_NUM, AVAILABLE_DEN = 3, 4


def parse_kernel_params(params: str) -> dict[str, str]:
    """The ``name=value`` words of a kernel command line (a bare word maps to ""); a later
    word wins, as the kernel's ``__setup`` and module parameters take the last given."""
    found: dict[str, str] = {}
    for word in params.split():
        name, _, value = word.partition("=")
        found[name] = value
    return found


_TRUE = ("1", "y", "Y", "yes", "on", "true", "force", "FORCE")


def guest_policy(kernel_params: str, settings: Settings, mech: Mechanism) -> GuestPolicy:
    """The onlining policy and memmap placement the ceiling assumes.

    ``memhp_default_state=online_movable`` (or ``online`` with
    ``memory_hotplug.online_policy=auto-movable``, or ``movable_node``) is movable,
    ``online_kernel`` a kernel zone (mm/memory_hotplug.c ``setup_memhp_default_state``,
    the ``online_policy`` module parameter); anything else leaves it to
    ``[kata_mem] guest_onlining``. memmap_on_memory counts only for DIMMs, and only when
    ``[kata_mem] guest_memmap_on_memory`` says the guest kernel places it for them.
    """
    words = parse_kernel_params(kernel_params)
    state = words.get("memhp_default_state")
    policy = words.get("memory_hotplug.online_policy", "contig-zones")
    onlining: Onlining = settings.guest_onlining
    onlining_from = f"[kata_mem] guest_onlining = {settings.guest_onlining}"
    if state == "online_movable":
        onlining, onlining_from = "movable", "kernel_params memhp_default_state=online_movable"
    elif state == "online_kernel":
        onlining, onlining_from = "kernel", "kernel_params memhp_default_state=online_kernel"
    elif policy == "auto-movable":
        onlining = "movable"
        onlining_from = "kernel_params memory_hotplug.online_policy=auto-movable"
    elif "movable_node" in words:
        onlining, onlining_from = "movable", "kernel_params movable_node"
    memmap = settings.guest_memmap_on_memory and mech == "pc-dimm"
    if memmap:
        memmap_from = "[kata_mem] guest_memmap_on_memory = true (pc-dimm)"
    elif settings.guest_memmap_on_memory:
        memmap_from = "not counted: virtio-mem adds its memory without memmap_on_memory"
    elif words.get("memory_hotplug.memmap_on_memory", "0") in _TRUE:
        memmap_from = (
            "not counted: kernel_params sets memory_hotplug.memmap_on_memory, which Linux "
            "before 6.8 applies only to one-memory-block ranges; set [kata_mem] "
            "guest_memmap_on_memory = true if the guest kernel places it for DIMMs"
        )
    else:
        memmap_from = "off"
    return GuestPolicy(onlining, onlining_from, memmap, memmap_from)


def memmap_size(added: int, arch: Arch) -> int:
    """The struct pages that describe ``added`` bytes (whole pages, rounded up)."""
    page = PAGE_SIZE[arch]
    return -(-added // page) * STRUCT_PAGE


def describable(room: int, arch: Arch) -> int:
    """The most memory whose struct pages fit in ``room`` bytes."""
    return max(room, 0) // STRUCT_PAGE * PAGE_SIZE[arch]


def guest_headroom(settings: Settings, kernel_memory: int) -> int:
    """What the guest keeps for itself after a hot-add: ``headroom_min``, or
    ``headroom_percent`` of its kernel-zone memory, whichever is more."""
    return align_up(
        max(settings.headroom_min, kernel_memory * settings.headroom_percent // 100), MiB
    )


def formula(c: GuestCeiling) -> str:
    """The arithmetic in one line, as ``preview`` shows it."""
    page = to_kib_floor(PAGE_SIZE[c.arch])
    avail = f"3/4 x {fmt_bytes(c.kernel_memory)} kernel-zone memory"
    if c.memmap_plugged:
        avail += f" - {fmt_bytes(c.memmap_plugged)} memmap of the plugged memory"
    if c.reading is not None:
        avail = f"min(guest MemAvailable {fmt_bytes(c.reading)}, {avail})"
    return (
        f"({avail} - headroom {fmt_bytes(c.headroom)}) = {fmt_bytes(c.room)} of "
        f"struct pages ({STRUCT_PAGE} B per {page} KiB page) describe "
        f"{fmt_bytes(c.addable)} more: at most {fmt_bytes(c.limit)} "
        f"(onlining {c.policy.onlining}: {c.policy.onlining_from})"
    )


def ceiling_at(
    policy: GuestPolicy,
    settings: Settings,
    arch: Arch,
    base: int,
    total: int,
    reading: Optional[int] = None,
) -> GuestCeiling:
    """The ceiling for a guest of ``total`` bytes booted with ``base``; ``reading`` is its
    MemAvailable from a fresh reading when there is one (``apply``)."""
    plugged = max(total - base, 0)
    kernel_memory = base if policy.onlining == "movable" else total
    memmap_plugged = memmap_size(plugged, arch)
    estimate = max(kernel_memory * AVAILABLE_NUM // AVAILABLE_DEN - memmap_plugged, 0)
    # A reading only ever lowers the estimate (MemAvailable also counts free ZONE_MOVABLE
    # memory, which holds no struct page), and is kept only where it does.
    if reading is not None and reading >= estimate:
        reading = None
    available = estimate if reading is None else max(reading, 0)
    headroom = guest_headroom(settings, kernel_memory)
    room = max(available - headroom, 0)
    addable = align_down(describable(room, arch), MiB)
    return GuestCeiling(
        policy=policy,
        arch=arch,
        total=total,
        kernel_memory=kernel_memory,
        memmap_plugged=memmap_plugged,
        estimate=estimate,
        reading=reading,
        available=available,
        headroom=headroom,
        room=room,
        addable=addable,
        limit=total + addable,
    )


#: How much longer a grow step may take per GiB it adds: the guest onlines each memory
#: block (128 MiB on x86) or virtio-mem block in turn, and a large grow under TCG is
#: still onlining after the 20 s default (a 150 GiB grow under TCG had 77 GiB online
#: after 20 s, all of it a few seconds later). Generous: a healthy guest is never an error.
GROW_S_PER_GIB = 1.0


def grow_timeout_s(settings: Settings, added: int) -> float:
    """How long a grow step adding ``added`` bytes is waited for: ``step_timeout_s``, plus
    :data:`GROW_S_PER_GIB` for every GiB it adds."""
    return settings.step_timeout_s + GROW_S_PER_GIB * max(added, 0) / GiB


def shows_grow(before_total: int, now_total: int, grown: int, arch: Arch) -> bool:
    """Whether the guest's MemTotal, ``before_total`` before a grow and ``now_total`` now,
    shows ``grown`` bytes online: all of it, less at most the struct pages of it (which
    memmap_on_memory takes from the added memory, and MemTotal then leaves out)."""
    return now_total - before_total >= grown - memmap_size(grown, arch)
