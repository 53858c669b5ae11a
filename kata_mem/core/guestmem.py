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
  ``CONFIG_MEMORY_HOTPLUG_DEFAULT_ONLINE=y`` (``CONFIG_MHP_DEFAULT_ONLINE_TYPE_ONLINE_AUTO=y``
  from Linux 6.14, which dropped the former; tools/packaging/kernel/configs/fragments/
  common/hotplug.conf), its default ``kernel_params`` set no ``memhp_default_state``
  (runtime-rs hypervisor/src/kernel_param.rs ``KernelParams::new``), and its agent writes
  ``1`` to each new block's ``online`` file (src/agent/src/uevent.rs ``online_device``;
  sandbox.rs ``online_memory``). Each is ``MMOP_ONLINE``, for which the kernel chooses the
  zone: ZONE_NORMAL under the default ``contig-zones`` policy (drivers/base/memory.c
  ``memory_subsys_online``; mm/memory_hotplug.c ``zone_for_pfn_range``,
  ``default_zone_for_pfn``). Kata guards the
  rest with a heuristic: at most 48x the guest memory per ACPI hot-add
  (src/runtime/virtcontainers/sandbox.go ``acpiMemoryHotplugFactor``, Kata #4847,
  PR #4862: "needing 64 bytes per 4KiB page ... 75% of available memory"); guests
  killed by large hot-adds: kata-containers/runtime #1244 and #2872.

kata-mem therefore assumes a kernel zone unless Kata's ``kernel_params`` or ``[kata_mem]
guest_onlining`` says otherwise (:data:`KATA_ONLINING`): the grows are staged, and a DIMM
is taken to be one the guest may not give back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from kata_mem.core.model import (
    Arch,
    GuestCeiling,
    GuestPolicy,
    Mechanism,
    MemoryDevice,
    Onlining,
    Settings,
)
from kata_mem.core.units import GiB, KiB, MiB, align_down, align_up, fmt_bytes, to_kib_floor
from kata_mem.core.values import Frozen

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


#: What the kernel's ``isspace`` takes for the space between two parameters
#: (include/linux/ctype.h ``_S``; lib/cmdline.c ``next_arg`` and ``skip_spaces``).
_SPACES = " \t\n\v\f\r"


class KernelParam(Frozen):
    """One parameter of a kernel command line as the kernel reads it: ``name`` and
    ``value`` with their quotes removed (``value`` None: no ``=``), and the word as it was
    written (``given``), which is how a plan names it."""

    name: str
    value: Optional[str]
    given: str

    @property
    def key(self) -> str:
        """The name as the kernel compares it: a ``-`` is a ``_`` (kernel/params.c
        ``dash2underscore``, used by ``parameq`` and ``parameqn``)."""
        return self.name.replace("-", "_")


def _next_arg(args: str) -> tuple[KernelParam, str]:
    """The first parameter of ``args`` and the rest, as lib/cmdline.c ``next_arg`` splits
    them: a word ends at a space outside double quotes; the value is what follows its first
    ``=`` (one at the word's very start does not count), without the quotes around it, and a
    word that starts with a quote loses the quote that ends it too ("You can use \" around
    spaces, but can't escape \"")."""
    quoted = args.startswith('"')
    word_start = 1 if quoted else 0
    in_quote = quoted
    equals = 0
    i = word_start
    while i < len(args):
        c = args[i]
        if c in _SPACES and not in_quote:
            break
        if equals == 0 and c == "=":
            equals = i - word_start
        if c == '"':
            in_quote = not in_quote
        i += 1
    word = args[word_start:i]
    # next_arg cuts the word short by writing NULs: ``end`` is where the last one lands.
    end = len(word) - 1 if quoted and word.endswith('"') else len(word)
    value: Optional[str] = None
    name = word[:end]
    if equals:
        name = word[:equals]
        start = equals + 1
        if word[start : start + 1] == '"':
            start += 1
            if word.endswith('"'):
                end = len(word) - 1
        value = word[start:end] if end > start else ""
    rest = args[i + 1 :] if i < len(args) else ""
    return KernelParam(name, value, args[:i]), rest.lstrip(_SPACES)


def parse_kernel_params(params: str) -> tuple[KernelParam, ...]:
    """The parameters of a kernel command line that the kernel reads itself, in order, as
    kernel/params.c ``parse_args`` reads them (init/main.c ``start_kernel``): each as
    :func:`_next_arg` splits it, up to a bare ``--``, after which the words are init's
    (``parse_args`` returns there, and ``start_kernel`` hands the rest to init)."""
    found: list[KernelParam] = []
    args = params.lstrip(_SPACES)
    while args:
        param, args = _next_arg(args)
        if param.value is None and param.name == "--":
            break
        found.append(param)
    return tuple(found)


def _last(
    params: tuple[KernelParam, ...], key: str, takes: Callable[[Optional[str]], bool]
) -> Optional[KernelParam]:
    """The last parameter named ``key`` whose value the kernel takes: each occurrence is
    handed to the parameter's setter in turn (``parse_one`` for module parameters,
    init/main.c ``obsolete_checksetup`` for ``__setup`` ones), and a value the setter
    refuses leaves what an earlier one set."""
    return next((p for p in reversed(params) if p.key == key and takes(p.value)), None)


#: ``memhp_default_state=`` (mm/memory_hotplug.c ``setup_memhp_default_state``, a
#: ``__setup``): the states ``mhp_online_type_from_str`` knows; any other is ignored.
_ONLINE_STATES = ("offline", "online", "online_kernel", "online_movable")
#: ``memory_hotplug.online_policy`` (mm/memory_hotplug.c ``set_online_policy``:
#: ``sysfs_match_string`` over ``online_policy_to_str``); any other is refused.
_ONLINE_POLICIES = ("contig-zones", "auto-movable")
_UINT_MAX = 2**32 - 1
#: ``memory_hotplug.auto_movable_ratio``'s default (mm/memory_hotplug.c): movable memory
#: up to 301 % of the kernel zones' boot memory.
AUTO_MOVABLE_RATIO = 301


def kstrtouint(value: Optional[str]) -> Optional[int]:
    """``value`` as lib/kstrtox.c ``kstrtouint(s, 0, ...)`` reads a ``uint`` module
    parameter (``param_set_uint``): an optional ``+``, ``0x`` for hexadecimal, a leading
    ``0`` for octal, one trailing newline; None where it refuses (then the parameter keeps
    its value)."""
    if value is None:
        return None
    s = value[:-1] if value.endswith("\n") else value
    s = s[1:] if s.startswith("+") else s
    base, digits = 10, s
    if s[:2].lower() == "0x":
        base, digits = 16, s[2:]
    elif s.startswith("0") and len(s) > 1:
        base, digits = 8, s[1:]
    allowed = "0123456789abcdef"[:base]
    if not digits or any(c not in allowed for c in digits.lower()):
        return None
    n = int(digits, base)
    return n if n <= _UINT_MAX else None


def memmap_setting(value: Optional[str]) -> Optional[bool]:
    """``memory_hotplug.memmap_on_memory=value`` as the kernel reads it (mm/memory_hotplug.c
    ``set_memmap_mode``: ``force``, else lib/kstrtox.c ``kstrtobool``; before Linux 6.6 a
    plain bool, which a bare name sets, kernel/params.c ``param_set_bool``); None where it
    refuses the value."""
    if value is None or value in ("force", "FORCE"):
        return True
    first, second = value[:1], value[1:2]
    if first in ("y", "Y", "t", "T", "1") or (first in ("o", "O") and second in ("n", "N")):
        return True
    if first in ("n", "N", "f", "F", "0") or (first in ("o", "O") and second in ("f", "F")):
        return False
    return None


def _takes_any(value: Optional[str]) -> bool:
    return True


#: Where the onlining comes from when neither ``kernel_params`` nor ``[kata_mem]
#: guest_onlining`` says: how Kata's guest kernel and agent online hot-added memory.
KATA_ONLINING = (
    "as Kata's guest onlines it: its kernel auto-onlines (hotplug.conf "
    "CONFIG_MEMORY_HOTPLUG_DEFAULT_ONLINE=y, CONFIG_MHP_DEFAULT_ONLINE_TYPE_ONLINE_AUTO=y from "
    "Linux 6.14) and its agent writes 1 to each new block's online file (uevent.rs "
    "online_device): ZONE_NORMAL; kernel_params and [kata_mem] guest_onlining say nothing"
)


def guest_policy(kernel_params: str, settings: Settings, mech: Mechanism) -> GuestPolicy:
    """The onlining policy and memmap placement the ceiling assumes.

    ``memhp_default_state=online_movable`` (or, for the memory it onlines with
    ``online``, ``memory_hotplug.online_policy=auto-movable`` unless
    ``memory_hotplug.auto_movable_ratio`` is 0, or ``movable_node``) is movable,
    ``online_kernel`` or ``online`` a kernel zone (mm/memory_hotplug.c
    ``setup_memhp_default_state``, the ``online_policy`` and ``auto_movable_ratio`` module
    parameters); anything else leaves it to ``[kata_mem] guest_onlining``, and without it
    to what Kata's guest does (:data:`KATA_ONLINING`): a kernel zone. memmap_on_memory
    counts only for DIMMs, and only when ``[kata_mem] guest_memmap_on_memory`` says the
    guest kernel places it for them. The parameters are read as the kernel reads them
    (:func:`parse_kernel_params`), and the origin names the one taken as it was written.
    """
    params = parse_kernel_params(kernel_params)
    state = _last(params, "memhp_default_state", lambda v: v in _ONLINE_STATES)
    policy = _last(params, "memory_hotplug.online_policy", lambda v: v in _ONLINE_POLICIES)
    ratio = _last(params, "memory_hotplug.auto_movable_ratio", lambda v: kstrtouint(v) is not None)
    movable_node = _last(params, "movable_node", _takes_any)
    onlining: Onlining
    movable_ratio: Optional[int] = None
    if state is not None and state.value == "online_movable":
        onlining, onlining_from = "movable", f"kernel_params {state.given}"
    elif state is not None and state.value == "online_kernel":
        onlining, onlining_from = "kernel", f"kernel_params {state.given}"
    elif policy is not None and policy.value == "auto-movable":
        # auto_movable_can_online_movable: memory goes to ZONE_MOVABLE only while the
        # movable memory stays within auto_movable_ratio percent (default 301) of the
        # boot memory's kernel zones, so with a ratio of 0 none of it does.
        percent = AUTO_MOVABLE_RATIO if ratio is None else kstrtouint(ratio.value)
        if ratio is not None and percent == 0:
            onlining = "kernel"
            onlining_from = f"kernel_params {policy.given} {ratio.given}"
        else:
            onlining, onlining_from = "movable", f"kernel_params {policy.given}"
            movable_ratio = percent
    elif movable_node is not None:
        onlining, onlining_from = "movable", f"kernel_params {movable_node.given}"
    elif state is not None and state.value == "online":
        # MMOP_ONLINE as the kernel adds it: ZONE_NORMAL under the contig-zones policy.
        onlining, onlining_from = "kernel", f"kernel_params {state.given}"
    elif settings.guest_onlining is not None:
        onlining = settings.guest_onlining
        onlining_from = f"[kata_mem] guest_onlining = {settings.guest_onlining}"
    else:
        onlining, onlining_from = "kernel", KATA_ONLINING
    memmap = settings.guest_memmap_on_memory and mech == "pc-dimm"
    memmap_param = _last(
        params, "memory_hotplug.memmap_on_memory", lambda v: memmap_setting(v) is not None
    )
    if memmap:
        memmap_from = "[kata_mem] guest_memmap_on_memory = true (pc-dimm)"
    elif settings.guest_memmap_on_memory:
        memmap_from = "not counted: virtio-mem adds its memory without memmap_on_memory"
    elif memmap_param is not None and memmap_setting(memmap_param.value):
        memmap_from = (
            f"not counted: kernel_params {memmap_param.given}, which Linux before 6.8 "
            "applies only to one-memory-block ranges; set [kata_mem] guest_memmap_on_memory "
            "= true if the guest kernel places it for DIMMs"
        )
    else:
        memmap_from = "off"
    return GuestPolicy(onlining, onlining_from, memmap, memmap_from, movable_ratio)


def kernel_zone_dimms(policy: GuestPolicy, base: int, dimms: tuple[MemoryDevice, ...]) -> set[str]:
    """The ids of the DIMMs the guest onlined to a kernel zone, as far as the policy tells:
    all of them with kernel onlining; with ``auto-movable``, each whose memory would have
    taken the movable memory past ``auto_movable_ratio`` percent of the boot memory when it
    was plugged. The kernel decides a DIMM as a whole (ACPI registers a static memory group
    per memory device, and ``auto_movable_zone_for_pfn`` puts all of a static group in a
    kernel zone unless all of it fits the ratio, ``auto_movable_can_online_movable``), in
    the order they come, taken here to be their slots' (QEMU gives a new DIMM the lowest
    free slot, and kata-mem unplugs the newest first). None with movable onlining.

    A DIMM in a kernel zone often cannot be unplugged: offlining it must migrate every
    page away, and unmovable kernel allocations land there (mm/memory_hotplug.c
    ``offline_pages``; Documentation/admin-guide/mm/memory-hotplug.rst, "ZONE_MOVABLE").
    """
    if policy.onlining == "kernel":
        return {d.id for d in dimms}
    if policy.movable_ratio is None:
        return set()
    room = base * policy.movable_ratio // 100
    movable = 0
    kernel: set[str] = set()
    for dimm in sorted(dimms, key=lambda d: (d.slot if d.slot is not None else -1, d.id)):
        if movable + dimm.size <= room:
            movable += dimm.size
        else:
            kernel.add(dimm.id)
    return kernel


def kernel_zone_text(policy: GuestPolicy, dimms: list[str], base: int) -> str:
    """Why DIMMs the guest onlined to a kernel zone are not unplugged, and how to make a
    decrease reliable: what a shrink refused for them says, in a plan and in its outcome.

    Measured on this project's test guest (Linux, its DIMMs onlined with
    ``memhp_default_state=online``): the guest answers QEMU's ACPI eject with ``_OST``
    0x82 (busy) and keeps the memory, no ``DEVICE_DELETED`` comes, and the unplug would stay
    pending for good; onlined movable, the same DIMM goes in 0.04 s."""
    if policy.onlining == "kernel":
        how = f"the guest onlines hot-added memory to a kernel zone ({policy.onlining_from})"
    else:
        how = (
            f"the guest onlined {', '.join(dimms)} to a kernel zone: past "
            f"memory_hotplug.auto_movable_ratio {policy.movable_ratio}% of the boot memory "
            f"{fmt_bytes(base)} ({policy.onlining_from})"
        )
    return (
        f"no DIMM is unplugged: {how}, from which a DIMM often cannot be unplugged (the "
        "guest answers the ACPI eject busy, _OST 0x82, and keeps the memory, so the unplug "
        "would stay pending). For decreases that can be relied on, use virtio-mem "
        "(enable_virtio_mem = true), which unplugs what it can block by block, or online "
        "movable: memhp_default_state=online_movable in Kata's kernel_params"
    )


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
