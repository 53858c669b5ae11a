"""Byte units and the only rounding helpers kata-mem uses.

Sizes are ``int`` bytes everywhere inside; MiB appear only at the edges (the
Kata TOML keys and the JSON output), through these helpers, so every rounding
is explicit and easy to find.
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def mib(n: int) -> int:
    """Return ``n`` MiB in bytes."""
    return n * MiB


def to_mib_floor(n: int) -> int:
    """Bytes to whole MiB, rounding down (Kata's ``>> 20``)."""
    return n // MiB


def to_mib_ceil(n: int) -> int:
    """Bytes to whole MiB, rounding up."""
    return -(-n // MiB)


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
    """Human form for messages: exact MiB when whole, else bytes."""
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    return f"{n} B"
