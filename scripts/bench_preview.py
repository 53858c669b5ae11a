#!/usr/bin/env python3
"""Benchmark: `kata-mem preview` start-up against `python3 -c pass`, and the planner
over 10,000 containers against a plain sum of the same limits.

Runs are interleaved (A, B, A, B, ...) so that machine noise hits both sides alike;
the figures that matter are the ratios of the medians. Prints a Markdown table for
docs/benchmarks.md.

    .venv/bin/python scripts/bench_preview.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kata_mem.core.model import Container, HostFacts, Workload  # noqa: E402
from kata_mem.core.plan import plan  # noqa: E402
from kata_mem.core.units import MiB  # noqa: E402
from kata_mem.edges.config import load_config  # noqa: E402

CONFIG = ROOT / "tests" / "fixtures" / "kata-configs" / "configuration-qemu.toml"
POD = ROOT / "examples" / "pods" / "memory-boom.yaml"


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def side_by_side(a: list[str], b: list[str], runs: int) -> tuple[list[float], list[float]]:
    ta, tb = [], []
    for _ in range(2):  # warm the page cache
        timed(a)
        timed(b)
    for _ in range(runs):
        ta.append(timed(a))
        tb.append(timed(b))
    return ta, tb


def imported_modules(cmd: list[str]) -> tuple[int, list[str]]:
    """Modules the command imports, from -X importtime (count, top-level packages)."""
    out = subprocess.run(
        [cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, check=True
    )
    names = [
        line.split("|")[-1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:")
    ]
    names = [n for n in names if n and n != "package"]
    return len(names), sorted({n.strip().split(".")[0] for n in names})


def planner_bench(n: int, runs: int) -> tuple[float, float]:
    cfg = load_config(CONFIG)
    host = HostFacts(memory=1 << 45, cpus=64, arch="amd64")
    containers = tuple(
        Container(f"c{i}", memory_limit=(i % 97 + 1) * MiB, cpu=Fraction(i % 7, 4))
        for i in range(n)
    )
    request = Workload(containers)
    plans, sums = [], []
    for _ in range(runs):
        start = time.perf_counter()
        plan(cfg, host, request)
        plans.append(time.perf_counter() - start)
        start = time.perf_counter()
        total = sum(max(c.memory_limit, 0) for c in containers)
        sum(c.cpu for c in containers)
        assert total > 0
        sums.append(time.perf_counter() - start)
    return statistics.median(plans), statistics.median(sums)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    py = sys.executable
    preview = [
        py,
        "-m",
        "kata_mem",
        "preview",
        "--config",
        str(CONFIG),
        "--pod",
        str(POD),
        "--host-memory",
        "31753Mi",
        "--host-cpus",
        "8",
        "--json",
    ]
    baseline = [py, "-c", "pass"]
    tp, tb = side_by_side(preview, baseline, args.runs)
    mp, mb = statistics.median(tp), statistics.median(tb)
    count, packages = imported_modules(preview)
    plan_s, sum_s = planner_bench(10_000, 15)
    heavy = sorted(set(packages) & {"qemu", "libvirt", "asyncio"})
    print(f"python {sys.version.split()[0]}, {args.runs} interleaved runs each\n")
    print("| measurement | median | baseline median | ratio |")
    print("| --- | --- | --- | --- |")
    print(
        f"| `kata-mem preview --json` (memory-boom) vs `python -c pass` | {mp * 1000:.1f} ms "
        f"| {mb * 1000:.1f} ms | {mp / mb:.2f} |"
    )
    print(
        f"| planner, 10,000 containers vs a plain sum of their limits | {plan_s * 1000:.2f} ms "
        f"| {sum_s * 1000:.2f} ms | {plan_s / sum_s:.2f} |"
    )
    print(f"\npreview imports {count} modules; backend packages among them: {heavy or 'none'}")
    print("top-level packages: " + ", ".join(p for p in packages if not p.startswith("_")))


if __name__ == "__main__":
    main()
