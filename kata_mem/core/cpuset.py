"""Linux CPU lists (an OCI ``linux.resources.cpu.cpus``), counted as Kata counts them.
Pure."""

from __future__ import annotations

import re

from kata_mem.core.errors import InputError

_CPU_SPAN = re.compile(r"([0-9]{1,10})(?:-([0-9]{1,10}))?", re.ASCII)


def cpuset_size(text: str, where: str) -> int:
    """The number of CPUs in a Linux CPU list such as ``"0-3,7"`` (an OCI
    ``linux.resources.cpu.cpus``); ``""`` is none.

    As Kata's ``cpuset.Parse`` (src/runtime/virtcontainers/pkg/cpuset) counts it: a
    set, so overlapping ranges count once. Where Kata silently counts a malformed
    list as no CPUs at all (``calculateSandboxCPUs`` then returns 0 for the whole
    sandbox), the container could not start under runc either: it is refused here.

    :raises InputError: a part that is not ``N`` or ``N-M`` with N <= M; ``where`` names the field.
    """
    if text == "":
        return 0
    spans: list[tuple[int, int]] = []
    for part in text.split(","):
        m = _CPU_SPAN.fullmatch(part)
        low = int(m[1]) if m else 0
        high = int(m[2]) if m and m[2] else low
        if m is None or high < low:
            raise InputError(
                f'{where}: {text[:80]!r}: expected a CPU list such as "0-3,7" '
                f"(CPU numbers and ascending ranges N-M, comma-separated); bad part {part[:40]!r}"
            )
        spans.append((low, high))
    count, end = 0, -1
    for low, high in sorted(spans):
        if high > end:
            count += high - max(low, end + 1) + 1
            end = high
    return count
