#!/usr/bin/env python3
"""Break the shrink-safety rule on purpose and check that the fast tests notice.

Each break is one small textual change to a copy of the package (the tree
itself is never touched). For each, the fast suite (everything but the
real-guest and libvirt tests) runs against the copy, stopping at the first
failure. A break that no test fails "survives": the suite does not guard that
part of the rule. Exit status 1 if any break survives or no longer applies.

    scripts/break_safety.py [--only NAME] [--list] [--no-control]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST = ["-m", "not guest and not libvirt"]
#: Unit tests first: a killed break is usually found in seconds.
ORDER = ["tests/unit", "tests/property", "tests/cli", "tests/integration"]


@dataclass(frozen=True)
class Break:
    name: str
    file: str
    old: str
    new: str


BREAKS = (
    Break(
        "headroom-zero",
        "kata_mem/core/safety.py",
        "return max(settings.headroom_min, block, target_total * settings.headroom_percent // 100)",
        "return 0",
    ),
    Break(
        "ignore-reading-age",
        "kata_mem/core/safety.py",
        "if age > settings.usage_max_age_s:",
        "if False:",
    ),
    Break(
        "all-caches-reclaimable",
        "kata_mem/core/model.py",
        "return max(min(self.disk_caches, self.available - self.free), 0)",
        "return max(self.disk_caches, 0)",
    ),
    Break(
        "ignore-major-faults",
        "kata_mem/core/safety.py",
        "if faults is not None and faults > MAJOR_FAULTS_PRESSURE:",
        "if False:",
    ),
    Break(
        "no-pressure-check",
        "kata_mem/core/safety.py",
        "    if spare < floor:\n",
        "    if False:\n",
    ),
    Break(
        "unknown-usage-runs",
        "kata_mem/core/safety.py",
        'return Verdict(\n            "defer",\n            "UsageUnknown",\n            "no guest memory statistics',
        'return Verdict(\n            "run",\n            "",\n            "no guest memory statistics',
    ),
    Break(
        "headroom-ignores-block",
        "kata_mem/core/safety.py",
        "return max(settings.headroom_min, block, ",
        "return max(settings.headroom_min, ",
    ),
    Break(
        "reserved-memory-ignored",
        "kata_mem/core/safety.py",
        "guest_after = usage.total - removed",
        "guest_after = after_total",
    ),
    Break(
        "fault-threshold-off-by-far",
        "kata_mem/core/safety.py",
        "MAJOR_FAULTS_PRESSURE = 1000",
        "MAJOR_FAULTS_PRESSURE = 100000",
    ),
    Break(
        "age-limit-inclusive-flip",
        "kata_mem/core/safety.py",
        "if age > settings.usage_max_age_s:",
        "if age > settings.usage_max_age_s * 10:",
    ),
)


#: The control: no change at all. It must pass, or every "killed" would mean nothing.
CONTROL = Break("none (control)", "kata_mem/core/safety.py", "", "")


def copy_tree(dest: Path) -> None:
    """The working tree without version control, virtualenvs or caches."""
    shutil.copytree(
        ROOT,
        dest,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", ".cache", "__pycache__", ".*_cache", ".hypothesis", "build", "dist"
        ),
    )


def run_break(brk: Break, python: str) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix="kata-mem-break-") as tmp:
        work = Path(tmp)
        copy_tree(work)
        if brk is not CONTROL:
            target = work / brk.file
            text = target.read_text()
            if text.count(brk.old) != 1:
                return "does-not-apply", 0.0
            target.write_text(text.replace(brk.old, brk.new))
        started = time.monotonic()
        proc = subprocess.run(
            [python, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", *FAST, *ORDER],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.monotonic() - started
        if proc.returncode == 1:
            return "killed", took
        if proc.returncode == 0:
            return "survived", took
        return f"error (pytest exit {proc.returncode}): {proc.stdout[-300:]}", took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run only this break")
    parser.add_argument("--list", action="store_true", help="list the breaks and exit")
    parser.add_argument(
        "--no-control",
        action="store_true",
        help="skip the control run (the caller has just run the fast suite on this tree)",
    )
    args = parser.parse_args()
    chosen = [b for b in BREAKS if not args.only or b.name in args.only]
    if args.list:
        for b in BREAKS:
            print(f"{b.name}: {b.file}")
        return 0
    bad = 0
    print(f"{'break':28} {'result':10} seconds")
    if not args.no_control:
        result, took = run_break(CONTROL, sys.executable)
        print(f"{CONTROL.name:28} {result:10} {took:6.1f}", flush=True)
        if result != "survived":
            print("the unbroken copy does not pass the fast suite: fix that first")
            return 1
    for brk in chosen:
        result, took = run_break(brk, sys.executable)
        print(f"{brk.name:28} {result:10} {took:6.1f}", flush=True)
        bad += result != "killed"
    print(f"{len(chosen) - bad} of {len(chosen)} breaks killed by the fast suite")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
