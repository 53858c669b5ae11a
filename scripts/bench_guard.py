#!/usr/bin/env python3
"""Benchmark: `kata-mem apply` with the host-side guard on against the same code with
the guard's reads taken out, side by side on a real guest.

Both sides run the real CLI as a fresh process through the same tiny wrapper
(``python -c``); the OFF side replaces ``kata_mem.orchestration.guards.HostSide.read`` with one
that returns ``Guards()`` (no cgroup, no node view: no /proc, cgroupfs or journal
reads) before calling ``kata_mem.interfaces.main.run``, the ON side calls it unchanged. So the
two differ only by what the guard reads. Runs alternate ON/OFF, OFF/ON, ... so that
machine noise hits both alike:

1. steady state (NoChange: the common case on every container event), ``--pairs`` pairs;
2. a +256 MiB pc-dimm grow from the boot size, ``--grow-pairs`` pairs (the DIMM is
   removed again between runs, not timed).

The state directory holds ``--others`` other sandboxes, whose journals the ON side
reads for the node's total. ``--cgroup-limit MIB`` puts QEMU in a fresh v1 memory
cgroup with that limit (root only; removed at the end), so the guard also walks a
real limit; without it QEMU stays in the cgroup this script runs in.

Finally each side runs once under ``strace -f -e trace=openat`` (when installed) and
the files only the ON side opens are listed.

    KATA_MEM_GUEST_DIR=.cache/guest .venv/bin/python scripts/bench_guard.py [--pairs 30]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kata_mem.core.record import Record  # noqa: E402
from kata_mem.edges.journal import SandboxState  # noqa: E402
from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

# Same imports on both sides; only the patch differs.
WRAPPER = """\
import sys
import kata_mem.orchestration.guards
from kata_mem.core.model import Guards
if sys.argv[1] == "off":
    kata_mem.orchestration.guards.HostSide.read = lambda self, vm, committed_others=None: Guards()
from kata_mem.interfaces.main import run
sys.argv = ["kata-mem", *sys.argv[2:]]
run()
"""

#: The guard alone, timed inside a fresh process as ``apply`` runs it: the lazy import
#: of kata_mem.edges.cgroups, then HostSide.read under the node lock for the QEMU pid.
GUARD_COST = """\
import sys, time
from pathlib import Path
from kata_mem.edges.config import load_config
from kata_mem.orchestration.guards import HostSide
from kata_mem.edges.ledger import node_admission
from kata_mem.core.model import HostFacts, VmState
cfg = load_config(Path(sys.argv[1]))
host = HostFacts(memory=32 << 30, cpus=8, arch="amd64")
vm = VmState(base=512 << 20, vmm_pid=int(sys.argv[2]))
with node_admission(sys.argv[3]) as committed:
    t0 = time.perf_counter()
    import kata_mem.edges.cgroups
    t1 = time.perf_counter()
    guards = HostSide(cfg, host).read(vm, lambda: committed("bench"))
    t2 = time.perf_counter()
assert guards.cgroup is not None and guards.node is not None, guards
print(t1 - t0, t2 - t1)
"""

MEMCG_V1 = Path("/sys/fs/cgroup/memory")


#: The environment of the kata-mem processes: bytecode cached (in a temporary prefix,
#: set by main) as a user's installed kata-mem has it, even where the caller's
#: environment turns caching off.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        cmd, check=True, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return time.perf_counter() - start


def unplug_all(sock: Path) -> None:
    """Back to the boot size (not timed)."""
    with QMPClient(sock) as q:
        for d in q.execute("query-memory-devices"):
            q.execute("device_del", {"id": d["data"]["id"]})
            q.wait_event("DEVICE_DELETED", timeout=60)
            q.execute("object-del", {"id": d["data"]["memdev"].removeprefix("/objects/")})


def pairs(
    on: list[str], off: list[str], n: int, before: Optional[Path] = None
) -> tuple[list[float], list[float]]:
    """``n`` interleaved pairs (plus one warm-up pair not counted); ``before`` is a
    QMP socket to unplug everything on before each run (for grows)."""
    t_on: list[float] = []
    t_off: list[float] = []
    for i in range(n + 1):
        for side in ("on", "off") if i % 2 == 0 else ("off", "on"):
            if before is not None:
                unplug_all(before)
            elapsed = timed(on if side == "on" else off)
            if i:
                (t_on if side == "on" else t_off).append(elapsed)
    return t_on, t_off


def guard_cost(cfg: Path, pid: int, state: Path, runs: int) -> tuple[float, float]:
    """Median (import, read) seconds of the guard over ``runs`` fresh processes."""
    imports, reads = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", GUARD_COST, str(cfg), str(pid), str(state)],
            check=True,
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
        )
        a, b = out.stdout.split()
        imports.append(float(a))
        reads.append(float(b))
    return statistics.median(imports), statistics.median(reads)


def busy_mountinfo(mounts: int = 5000) -> tuple[int, float]:
    """Size and parse time (median of 20, this process) of this host's mountinfo plus
    ``mounts`` container rootfs mounts, as on a busy node."""
    from kata_mem.edges.cgroups import parse_mountinfo

    extra = (
        f"{1000 + i} 23 0:{100 + i} / /run/containerd/io.containerd.runtime.v2.task/k8s.io/"
        f"{i:064x}/rootfs rw,relatime - overlay overlay rw,lowerdir=/var/lib/x/{i}/fs,"
        f"upperdir=/var/lib/z/{i}/fs,workdir=/var/lib/w/{i}/work"
        for i in range(mounts)
    )
    text = Path("/proc/self/mountinfo").read_text() + "\n".join(extra) + "\n"
    times = []
    for _ in range(20):
        start = time.perf_counter()
        parse_mountinfo(text)
        times.append(time.perf_counter() - start)
    return len(text), statistics.median(times)


def bootstrap(t_on: list[float], t_off: list[float], rounds: int = 2000) -> tuple[float, float]:
    """95% interval of median(ON)/median(OFF), resampling the pairs."""
    rng = random.Random(11)
    idx = range(len(t_on))
    ratios = []
    for _ in range(rounds):
        pick = [rng.choice(idx) for _ in idx]
        ratios.append(
            statistics.median(t_on[i] for i in pick) / statistics.median(t_off[i] for i in pick)
        )
    ratios.sort()
    return ratios[int(0.025 * rounds)], ratios[int(0.975 * rounds) - 1]


def p90(xs: list[float]) -> float:
    return sorted(xs)[max(int(0.9 * len(xs)) - 1, 0)]


def row(name: str, t_on: list[float], t_off: list[float]) -> str:
    on, off = statistics.median(t_on), statistics.median(t_off)
    lo, hi = bootstrap(t_on, t_off)
    diffs = [a - b for a, b in zip(t_on, t_off, strict=True)]
    paired = statistics.median(diffs)
    rng = random.Random(11)
    boot = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))

    def spread(xs: list[float]) -> str:
        return f"{min(xs) * 1000:.0f} / {p90(xs) * 1000:.0f}"

    return (
        f"| {name} | {len(t_on)} | {on * 1000:.0f} ms | {off * 1000:.0f} ms | **{on / off:.3f}** "
        f"| {lo:.3f}-{hi:.3f} "
        f"| {paired * 1000:+.1f} ms ({boot[50] * 1000:+.1f} to {boot[1949] * 1000:+.1f}) | {spread(t_on)} | {spread(t_off)} |"
    )


_OPENAT = re.compile(r'openat\([^,]+, "([^"]*)", ([A-Z_|]+)[^=]*= (-?\d+)')


def opened(cmd: list[str], work: Path, tag: str) -> collections.Counter[str]:
    """The files ``cmd`` opens successfully (with strace), with counts."""
    log = work / f"strace-{tag}.txt"
    subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(log), *cmd],
        check=True,
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    found: collections.Counter[str] = collections.Counter()
    for line in log.read_text().splitlines():
        m = _OPENAT.search(line)
        if m and int(m.group(3)) >= 0:
            found[re.sub(r"\.[0-9]+\.tmp$", ".PID.tmp", m.group(1))] += 1
    return found


@contextlib.contextmanager
def memory_cgroup(limit_mib: Optional[int]) -> Iterator[Optional[Path]]:
    """A fresh v1 memory cgroup with ``limit_mib`` (None: none made)."""
    if limit_mib is None:
        yield None
        return
    path = MEMCG_V1 / f"kata-mem-bench-{os.getpid()}"
    path.mkdir()
    try:
        (path / "memory.limit_in_bytes").write_text(str(limit_mib << 20))
        # QEMU's charge moves with it where the kernel can (v1 keeps it in the old cgroup
        # otherwise: usage then counts only what QEMU touches from now on).
        with contextlib.suppress(OSError):
            (path / "memory.move_charge_at_immigrate").write_text("3")
        yield path
    finally:
        for _ in range(50):  # QEMU may take a moment to leave it
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=30, help="NoChange pairs (default 30)")
    parser.add_argument("--grow-pairs", type=int, default=6, help="grow pairs (default 6)")
    parser.add_argument("--others", type=int, default=3, help="other sandboxes in the state dir")
    parser.add_argument("--cgroup-limit", type=int, metavar="MIB", help="QEMU's v1 memcg limit")
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    python = sys.executable
    with (
        tempfile.TemporaryDirectory(prefix="kata-mem-bench-") as tmp,
        memory_cgroup(args.cgroup_limit) as cgroup,
    ):
        work = Path(tmp)
        ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        state = work / "state"
        cfg = work / "c.toml"
        cfg.write_text(
            "[hypervisor.qemu]\ndefault_memory = 512\ndefault_maxmemory = 4096\n"
            f'[kata_mem]\nstate_dir = "{state}"\n'
        )
        spec = GuestSpec(virtio_mem_mib=0)
        with GuestVM(guest_dir, work / "vm", spec) as vm:
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(vm.pid))
            cli = [
                "apply",
                *("--config", str(cfg), "--qmp", str(vm.qmp_socket), "--sandbox", "bench"),
                *("--limit", "256Mi", "--host-memory", "32Gi", "--host-cpus", "8", "--json"),
            ]
            on = [python, "-c", WRAPPER, "on", *cli]
            off = [python, "-c", WRAPPER, "off", *cli]
            out = subprocess.run(on, check=True, cwd=ROOT, env=ENV, capture_output=True, text=True)
            subprocess.run(off, check=True, cwd=ROOT, env=ENV, capture_output=True)  # bytecode
            assert '"host_cgroup"' in out.stdout, out.stdout
            for n in range(args.others):  # other sandboxes: the node's total reads them
                other = SandboxState(state, f"other-{n}")
                with other.locked(5.0):
                    other.save(Record(other.sandbox, observed=1024 << 20))
            steady = pairs(on, off, args.pairs)
            reads = None
            if shutil.which("strace") is not None:
                reads = (opened(on, work, "on"), opened(off, work, "off"))
            cost = guard_cost(cfg, vm.pid, state, args.pairs)
            grow = pairs(on, off, args.grow_pairs, before=vm.qmp_socket)
            host_cgroup = re.search(r'"host_cgroup": (\{[^}]*\}|null)', out.stdout)

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, TCG guest (pc-dimm), "
        f"{args.others} other sandboxes in the state dir, QEMU's memory cgroup: "
        f"{f'fresh v1 cgroup, limit {args.cgroup_limit} MiB' if cgroup else 'inherited'}; "
        "one warm-up pair not counted\n"
    )
    print(
        "| `kata-mem apply` | pairs | guard on (median) | guard off (median) | ratio on/off "
        "| 95% bootstrap | on - off, paired median (95%) | on min / p90 | off min / p90 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(row("NoChange (steady state)", *steady))
    print(row("+256 MiB pc-dimm grow", *grow))
    imp, read = cost
    off_min = min(steady[1])
    print(
        f"\nthe guard alone, in-process (median of {args.pairs} fresh processes): import of "
        f"kata_mem.edges.cgroups {imp * 1000:.2f} ms + HostSide.read {read * 1000:.2f} ms = "
        f"{(imp + read) * 1000:.2f} ms, {(imp + read) / off_min * 100:.1f}% of the fastest "
        f"NoChange apply with it off ({off_min * 1000:.0f} ms)"
    )
    size, parse = busy_mountinfo()
    print(
        f"a busy node's mountinfo (this host's + 5000 container mounts, {size >> 10} KiB): "
        f"parse_mountinfo {parse * 1000:.2f} ms (the /proc read itself not included)"
    )
    if host_cgroup:
        print(f"\nfirst apply's host_cgroup: {host_cgroup.group(1)}")
    if reads is None:
        print("\n(strace not installed: file opens not counted)")
        return
    on_files, off_files = reads
    extra = on_files - off_files
    print(
        f"\nfiles opened (strace openat, successful): guard on {sum(on_files.values())}, "
        f"off {sum(off_files.values())}; only with the guard on ({sum(extra.values())}):"
    )
    for path, count in sorted(extra.items()):
        print(f"  {count} x {path.replace(str(work), '$TMP')}")
    missing = off_files - on_files
    if missing:
        print(f"  (only with it off: {dict(missing)})")


if __name__ == "__main__":
    main()
