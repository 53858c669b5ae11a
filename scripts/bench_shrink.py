#!/usr/bin/env python3
"""Benchmark: shrink an idle guest safely (every step checked against a guest reading
fresh for that step) against the unsafe ``--force`` path (no checks), on the same
guest, alternating round by round: 1 GiB of virtio-mem back to 0 in 4 steps, and two
512 MiB DIMMs unplugged one by one. Prints the medians side by side and where the
time of each step goes (a timeline from the backend's calls).

    .venv/bin/python scripts/bench_shrink.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kata_mem.backends import StepProgress  # noqa: E402
from kata_mem.backends.qmp import QmpBackend  # noqa: E402
from kata_mem.core.backing import dimm_backend  # noqa: E402
from kata_mem.core.model import Container, GuestUsage, HostFacts, Step, VmState, Workload  # noqa: E402
from kata_mem.edges.config import load_config  # noqa: E402
from kata_mem.edges.journal import SandboxState  # noqa: E402
from kata_mem.orchestration.executor import Options, run_locked  # noqa: E402
from tests.support.configs import GUEST_KERNEL_PARAMS, write_config  # noqa: E402
from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
HOST = HostFacts(memory=16 * GiB, cpus=4, arch="amd64")
#: The timeline's columns: a step's check (reading the guest, waiting for a reading
#: fresh for it), the resize (commands until the hypervisor reports it done), verifying
#: (observing the VM after it), and the rest (journal, planning, connecting).
PHASES = ("reading", "resize", "verify", "other")


@dataclass
class Timeline:
    """Backend calls of one apply, as (phase, start, end), and when each step began."""

    calls: list[tuple[str, float, float]] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0

    def steps(self) -> list[dict[str, float]]:
        """Per step (and a last row for after the last step): seconds in each phase.
        A step's row runs from the end of the previous one to its resize's end."""
        rows: list[dict[str, float]] = []
        row = dict.fromkeys(PHASES, 0.0)
        edge = self.start
        for phase, a, b in self.calls:
            if phase != "resize-done":
                row[phase] += b - a
                continue
            row["resize"] += b - a
            row["other"] = (b - edge) - sum(row[p] for p in PHASES[:3])
            rows.append(row)
            row, edge = dict.fromkeys(PHASES, 0.0), b
        row["other"] = (self.end - edge) - sum(row[p] for p in PHASES[:3])
        rows.append(row)
        return rows


class Timed:
    """The QMP backend, with each call put on a timeline (nothing else changes)."""

    def __init__(self, backend: QmpBackend, timeline: Timeline) -> None:
        self._b, self._t = backend, timeline
        self._resizing: Optional[float] = None

    def _timed(self, phase: str, call: Callable[[], Any]) -> Any:
        a = time.perf_counter()
        try:
            return call()
        finally:
            # A reading while a step is pending (the pressure watch) is part of the resize.
            if self._resizing is None:
                self._t.calls.append((phase, a, time.perf_counter()))

    def observe(self) -> VmState:
        return self._timed("verify", self._b.observe)  # type: ignore[no-any-return]

    def begin(self, step: Step) -> None:
        self._resizing = time.perf_counter()
        self._b.begin(step)

    def poll(self, step: Step, wait_s: float) -> StepProgress:
        progress: StepProgress = self._b.poll(step, wait_s)
        if progress.state != "pending" and self._resizing is not None:
            self._t.calls.append(("resize-done", self._resizing, time.perf_counter()))
            self._resizing = None
        return progress

    def guest_usage(self) -> Optional[GuestUsage]:
        return self._timed("reading", self._b.guest_usage)  # type: ignore[no-any-return]

    def read_and_ask(self, seconds: int) -> Optional[GuestUsage]:
        return self._timed("reading", lambda: self._b.read_and_ask(seconds))  # type: ignore[no-any-return]

    def set_stats_interval(self, seconds: int) -> Optional[int]:
        return self._timed("reading", lambda: self._b.set_stats_interval(seconds))  # type: ignore[no-any-return]

    def close(self) -> None:
        self._b.close()


def _settle_readings(sock: Path) -> None:
    """Wait until the guest has reported statistics after the plug, as an idle guest would
    (not timed): two readings, a second apart."""
    with QMPClient(sock) as q:
        path = "/machine/peripheral/balloon0"
        first = q.execute("qom-get", {"path": path, "property": "guest-stats"})["last-update"]
        deadline = time.monotonic() + 10
        while (
            q.execute("qom-get", {"path": path, "property": "guest-stats"})["last-update"]
            < first + 2
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)


def plug_virtio(sock: Path) -> None:
    """Back to 1 GiB of virtio-mem plugged (not timed)."""
    with QMPClient(sock) as q:
        q.execute(
            "qom-set",
            {"path": "/machine/peripheral/vm0", "property": "requested-size", "value": GiB},
        )
        deadline = time.monotonic() + 30
        while (
            next(
                d["data"]["size"]
                for d in q.execute("query-memory-devices")
                if d["type"] == "virtio-mem"
            )
            != GiB
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("plug did not complete")
            time.sleep(0.02)
    _settle_readings(sock)


def plug_dimms(sock: Path, cfg_path: Path, state: Path) -> None:
    """Two 512 MiB DIMMs, plugged by kata-mem so that they are its own (not timed)."""
    cfg = load_config(cfg_path)
    for total in (1024, 1536):
        result = run_locked(
            SandboxState(state, "bench"),
            lambda: QmpBackend.connect(str(sock), dimm_backend=dimm_backend(cfg)),
            cfg,
            HOST,
            Workload((Container("c", (total - 512) * MiB),)),
            Options(),
        )
        assert result.outcome.status in ("Resized", "NoChange"), result.outcome
    _settle_readings(sock)


def shrink(sock: Path, cfg_path: Path, state: Path, force: bool, timeline: Timeline) -> int:
    cfg = load_config(cfg_path)
    options = Options(allow_shrink=True, force=force)
    timeline.start = time.perf_counter()
    result = run_locked(
        SandboxState(state, "bench"),
        lambda: Timed(QmpBackend.connect(str(sock), dimm_backend=dimm_backend(cfg)), timeline),
        cfg,
        HOST,
        Workload(),
        options,
    )
    timeline.end = time.perf_counter()
    assert result.outcome.status == "Resized", result.outcome
    return len(result.outcome.steps)


def run(mechanism: str, rounds: int, guest_dir: Path, work: Path) -> dict[str, Any]:
    virtio = mechanism == "virtio-mem"
    cfg = write_config(
        work / f"{mechanism}.toml",
        # shared_fs none: DIMMs of memory-backend-ram (the bench guest shares no file system);
        # the bench guest onlines movable (GuestSpec), as kernel_params then say, so that its
        # DIMMs can be unplugged
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "enable_virtio_mem": virtio,
            "shared_fs": "none",
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
    )
    times: dict[str, list[float]] = {"safe": [], "force": []}
    lines: dict[str, list[list[dict[str, float]]]] = {"safe": [], "force": []}
    steps = 0
    spec = GuestSpec(virtio_mem_mib=2048 if virtio else 0)
    with GuestVM(guest_dir, work / mechanism, spec) as vm:
        state = work / f"state-{mechanism}"
        for i in range(rounds + 1):  # round 0 warms up and is not counted
            for side in ("safe", "force") if i % 2 == 0 else ("force", "safe"):
                if virtio:
                    plug_virtio(vm.qmp_socket)
                else:
                    plug_dimms(vm.qmp_socket, cfg, state)
                timeline = Timeline()
                steps = shrink(vm.qmp_socket, cfg, state, side == "force", timeline)
                if i:
                    times[side].append(timeline.end - timeline.start)
                    lines[side].append(timeline.steps())
    return {"mechanism": mechanism, "steps": steps, "times": times, "lines": lines}


def _median_rows(runs: list[list[dict[str, float]]]) -> list[dict[str, float]]:
    return [
        {p: statistics.median(r[i][p] for r in runs) for p in PHASES} for i in range(len(runs[0]))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mechanism", choices=("virtio-mem", "pc-dimm", "both"), default="both")
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    mechanisms = ("virtio-mem", "pc-dimm") if args.mechanism == "both" else (args.mechanism,)
    # The state directory on tmpfs, as kata-mem's default /run/kata-mem is on a node (the
    # journal's fsyncs cost ~8 ms each on this machine's disk, and nothing on tmpfs).
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-", dir=SHM) as tmp:
        results = [run(m, args.rounds, guest_dir, Path(tmp)) for m in mechanisms]
    print(f"{args.rounds} alternating rounds per mechanism, idle TCG guest\n")
    print("| shrink | steps | safe (median) | `--force` (median) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    what = {"virtio-mem": "1 GiB of virtio-mem -> 0", "pc-dimm": "2 x 512 MiB DIMMs -> 0"}
    for r in results:
        safe, force = (statistics.median(r["times"][s]) for s in ("safe", "force"))
        print(
            f"| {what[r['mechanism']]} | {r['steps']} | {safe * 1000:.0f} ms "
            f"| {force * 1000:.0f} ms | {safe / force:.2f} |"
        )
    for r in results:
        for side in ("safe", "force"):
            each = ", ".join(f"{t * 1000:.0f}" for t in r["times"][side])
            print(f"\n{r['mechanism']} {side}, each round (ms): {each}", end="")
        print()
    for r in results:
        print(f"\ntimeline, {r['mechanism']}, medians in ms (safe / force):\n")
        print("| step | " + " | ".join(PHASES) + " |")
        print("| --- |" + " --- |" * len(PHASES))
        safe_rows, force_rows = (_median_rows(r["lines"][s]) for s in ("safe", "force"))
        for i, (s, f) in enumerate(zip(safe_rows, force_rows, strict=True)):
            name = f"{i + 1}" if i < len(safe_rows) - 1 else "after the last"
            cells = " | ".join(f"{s[p] * 1000:.0f} / {f[p] * 1000:.0f}" for p in PHASES)
            print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
