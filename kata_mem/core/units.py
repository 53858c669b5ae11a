"""Byte units, the 64-bit integer limits, and the only rounding helpers kata-mem uses.

Sizes are ``int`` bytes everywhere inside; MiB and KiB appear only at the edges
(the Kata TOML keys, the JSON output, the hypervisors' wire formats), through
these helpers, so every rounding is explicit and easy to find.
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: The ranges of Go's int64 and uint64, which Kata and Kubernetes decode numbers into
#: (a Kubernetes quantity's byte value is capped at INT64_MAX).
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1


def to_mib_floor(n: int) -> int:
    """Bytes to whole MiB, rounding down (Kata's ``>> 20``)."""
    return n // MiB


def to_mib_ceil(n: int) -> int:
    """Bytes to whole MiB, rounding up."""
    return -(-n // MiB)


def to_mib_nearest(n: int) -> int:
    """Bytes to whole MiB, rounding to the nearest (halves up): for messages only."""
    return (n + MiB // 2) // MiB


def per_gib_ceil(rate: int, n: int) -> int:
    """``rate`` bytes for every GiB of ``n`` bytes, rounding up (a cost is never under-counted)."""
    return -(-rate * n // GiB)


def to_kib_floor(n: int) -> int:
    """Bytes to whole KiB, rounding down."""
    return n // KiB


def align_down(n: int, block: int) -> int:
    """Largest multiple of ``block`` not above ``n``; ``block`` <= 1 means no alignment."""
    if block <= 1:
        return n
    return n - n % block


def align_up(n: int, block: int) -> int:
    """Smallest multiple of ``block`` not below ``n``; ``block`` <= 1 means no alignment."""
    if block <= 1:
        return n
    return -(-n // block) * block


def fmt_bytes(n: int) -> str:
    """Human form for messages, always in MiB: exact when whole (every size a plan sets
    is), else to two decimals rounded away from zero, so that a size that is not whole
    MiB (observed, or given by hand) never reads as a whole one."""
    if n % MiB == 0:
        return f"{to_mib_floor(n)} MiB"
    hundredths = -(-abs(n) * 100 // MiB)
    return f"{'-' if n < 0 else ''}{hundredths // 100}.{hundredths % 100:02d} MiB"


def fmt_requested(n: int) -> str:
    """A size asked for, as a plan shows it everywhere (``requested_mib`` and the table
    are :func:`to_mib_ceil` of it, and so is the text of a clamp): whole MiB, rounded
    up, so that 2048 MiB and a byte never reads 2049 in one place and 2048.01 in another."""
    return f"{to_mib_ceil(n)} MiB"
