"""Architecture names and hugepage sizes, as Kata and the kernel spell them. Pure.

Every interface reads an architecture name (``--host-arch``, a request's ``host.arch``,
the host's ``uname -m``) and a hugepage size (a pool given by hand, a request's
``hugepage_limits``, a pod's ``hugepages-<size>``) here, once.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Optional

from kata_mem.core.errors import InputError
from kata_mem.core.model import ARCHES, Arch
from kata_mem.core.units import GiB, KiB, MiB

#: ``uname -m`` names and Go ``GOARCH`` names of the architectures Kata builds for,
#: to the Go name kata-mem uses everywhere inside (``ARCHES``).
GO_ARCH: dict[str, Arch] = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
assert set(GO_ARCH.values()) == set(ARCHES)

#: The hugepage sizes Linux offers on each architecture, as the kernel accepts them
#: (``arch_hugetlb_valid_size``): x86_64 PMD and PUD, 2 MiB and 1 GiB
#: (arch/x86/mm/hugetlbpage.c); arm64 with 4 KiB base pages, contiguous PTE, PMD,
#: contiguous PMD and PUD, 64 KiB, 2 MiB, 32 MiB and 1 GiB (the table of
#: Documentation/arch/arm64/hugetlbpage.rst; 16 KiB and 64 KiB base-page kernels
#: offer other sizes, which kata-mem does not assume); ppc64le 16 MiB and 16 GiB with
#: the hash MMU, 2 MiB and 1 GiB with radix (arch/powerpc/mm/hugetlbpage.c); s390x
#: 1 MiB and 2 GiB, EDAT1 and EDAT2 (arch/s390/mm/hugetlbpage.c); riscv64 2 MiB and
#: 1 GiB, and 64 KiB with Svnapot (arch/riscv/mm/hugetlbpage.c).
HUGEPAGE_SIZES: dict[Arch, tuple[int, ...]] = {
    "amd64": (2 * MiB, GiB),
    "arm64": (64 * KiB, 2 * MiB, 32 * MiB, GiB),
    "ppc64le": (2 * MiB, 16 * MiB, GiB, 16 * GiB),
    "s390x": (MiB, 2 * GiB),
    "riscv64": (64 * KiB, 2 * MiB, GiB),
}
assert tuple(HUGEPAGE_SIZES) == ARCHES


def normalize_arch(name: str, what: str) -> Arch:
    """The Go name of an architecture given by its ``uname -m`` or Go name.

    The one place architecture names are read: an unknown name would silently
    lose the per-architecture vCPU cap, so it is refused.

    :raises InputError: for a name that is not one of the architectures Kata supports;
        ``what`` names where it came from.
    """
    arch = GO_ARCH.get(name)
    if arch is None:
        pairs = ", ".join("/".join(k for k, v in GO_ARCH.items() if v == go) for go in ARCHES)
        raise InputError(
            f"{what} {name!r}: not an architecture Kata supports; expected one of {pairs} "
            "(the uname -m or Go name)"
        )
    return arch


def _size_name(size: int) -> str:
    from kata_mem.core.quantity import format_quantity

    return format_quantity(Fraction(size))


def check_hugepage_size(size: int, arch: Arch, what: str) -> int:
    """``size`` (bytes), when it is a hugepage size of ``arch`` (:data:`HUGEPAGE_SIZES`).

    :raises InputError: naming ``what`` and the sizes the architecture has.
    """
    sizes = HUGEPAGE_SIZES[arch]
    if size not in sizes:
        raise InputError(
            f"{what}: page size {_size_name(size)} is not a hugepage size of {arch}; expected "
            + " or ".join(map(_size_name, sizes))
        )
    return size


def check_hugepages(
    count: int, size: int, what: str, arch: Optional[Arch] = None
) -> tuple[int, int]:
    """A hugepage pool given by hand: ``count`` pages of ``size`` bytes, a hugepage size
    of ``arch`` (of any architecture while ``arch`` is not known yet).

    :raises InputError: a negative count, or a size that is no hugepage size.
    """
    if count < 0 or count > (1 << 63) // max(size, 1):
        raise InputError(
            f"{what}: page count {count}: expected 0 or more pages, at most 2^63 bytes"
        )
    if arch is not None:
        check_hugepage_size(size, arch, what)
    elif not any(size in sizes for sizes in HUGEPAGE_SIZES.values()):
        every = sorted({s for sizes in HUGEPAGE_SIZES.values() for s in sizes})
        raise InputError(
            f"{what}: page size {_size_name(size)} is not a hugepage size of any architecture "
            f"Kata supports; expected one of {', '.join(map(_size_name, every))} (the "
            "Hugepagesize of /proc/meminfo)"
        )
    return count, size
