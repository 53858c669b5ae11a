#!/usr/bin/env python3
"""Benchmark: `apply` of +1 GiB (pc-dimm and virtio-mem) on a real guest, against two
minimal stdlib-only QMP clients issuing the essential commands to the same guest:

- "stdlib": done when QEMU has the memory, waiting the fastest correct way (the guest's
  event for pc-dimm; polling at kata-mem's own interval for virtio-mem);
- "stdlib + guest": the same, then done when a fresh reading of the guest shows the
  memory online, as kata-mem's rule is ("a resize is done when a fresh reading from the
  guest shows it"): the guest's statistics asked for with the verifying read, and read
  until MemTotal shows the grow. It takes the latest reading as the one before the plug
  (it knows the reset before it left the guest's reading current); kata-mem asks for a
  fresh one, as it cannot know that.

All sides start from the same state (nothing plugged, a current reading), are timed from
connect to verified completion, and take turns round by round so machine noise hits them
alike. Between rounds the memory is removed again with the stdlib client (not timed).

    .venv/bin/python scripts/bench_apply.py [--rounds 10]

kata-mem is called in-process (``apply_request``), so Python start-up is not part
of either side; its QMP round trips are counted by the backend.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kata_mem.backends.qmp import VIRTIO_MEM_POLL_S, QmpBackend  # noqa: E402
from kata_mem.core.backing import dimm_backend  # noqa: E402
from kata_mem.core.guestmem import shows_grow  # noqa: E402
from kata_mem.core.model import Container, HostFacts, Settings, Workload  # noqa: E402
from kata_mem.edges.config import load_config  # noqa: E402
from kata_mem.edges.journal import SandboxState  # noqa: E402
from kata_mem.orchestration.executor import Options, run_locked  # noqa: E402
from tests.support.configs import write_config  # noqa: E402
from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

GiB = 1 << 30
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
HOST = HostFacts(memory=16 * GiB, cpus=4, arch="amd64")
REQUEST = Workload((Container("c", GiB),))


def inserted(event: dict[str, Any], device: str) -> bool:
    """Whether ``event`` (ACPI_DEVICE_OST) says the guest took ``device`` in: source 1 is
    an insert, status 0 success (ACPI 6.5, 6.3.5 _OST)."""
    info = event["data"]["info"]
    return bool(
        info.get("device") == device and info.get("source") == 1 and info.get("status") == 0
    )


def wait_until(pred: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("the guest did not complete")
        time.sleep(0.01)


def baseline_dimm(sock: Path) -> int:
    """The essential pc-dimm hotplug: observe, object-add, device_add, wait for the
    guest's ACPI_DEVICE_OST (the event: the fastest correct wait), verify. Returns the
    number of round trips."""
    with QMPClient(sock) as q:
        q.execute("query-memory-devices")
        _plug(q)
        devices = q.execute("query-memory-devices")
        assert any(d["data"].get("id") == "bdimm0" for d in devices)
        return 5  # capabilities + 4 commands


def _plug(q: QMPClient) -> None:
    """object-add, device_add, and the guest's insert confirmation for this DIMM (an
    eject's, source 3, from the previous round's unplug can still arrive first)."""
    q.execute("object-add", {"qom-type": "memory-backend-ram", "id": "bmem0", "size": GiB})
    q.execute("device_add", {"driver": "pc-dimm", "id": "bdimm0", "memdev": "bmem0"})
    while not inserted(q.wait_event("ACPI_DEVICE_OST", timeout=30), "bdimm0"):
        pass


def baseline_virtio(sock: Path) -> int:
    """The essential virtio-mem resize: observe, set requested-size, and read the size
    until it is reached, as often as kata-mem does (``VIRTIO_MEM_POLL_S``: QEMU
    rate-limits MEMORY_DEVICE_SIZE_CHANGE to one a second, so polling is the fastest
    correct wait). Returns the number of round trips."""
    with QMPClient(sock) as q:
        q.execute("query-memory-devices")
        return 2 + _resize(q)


def _resize(q: QMPClient) -> int:
    """Set the virtio-mem device's requested size to 1 GiB and read its size until it is
    reached, every ``VIRTIO_MEM_POLL_S``. Returns the round trips."""
    q.execute(
        "qom-set",
        {"path": "/machine/peripheral/vm0", "property": "requested-size", "value": GiB},
    )
    trips = 1
    while True:
        trips += 1
        dev = next(
            d["data"] for d in q.execute("query-memory-devices") if d["type"] == "virtio-mem"
        )
        if dev["size"] == GiB:
            return trips
        time.sleep(VIRTIO_MEM_POLL_S)


BALLOON = "/machine/peripheral/balloon0"  # GuestSpec's balloon
#: The polling interval kata-mem's apply leaves set (its default), which the guest-confirming
#: client puts back after its ask.
INTERVAL = Settings().stats_interval_s


def _total(q: QMPClient) -> int:
    """The guest's MemTotal in its latest reading."""
    return int(
        q.execute("qom-get", {"path": BALLOON, "property": "guest-stats"})["stats"][
            "stat-total-memory"
        ]
    )


def _shows(q: QMPClient, before: int) -> int:
    """Ask the guest for a reading (interval 0, then back: QEMU polls at once), sent with
    the verifying ``query-memory-devices``, then read the latest until its MemTotal shows
    the grow, looking at once and then every millisecond. Returns the round trips."""
    ask = [
        ("qom-set", {"path": BALLOON, "property": "guest-stats-polling-interval", "value": v})
        for v in (0, INTERVAL)
    ]
    q.execute_all([("query-memory-devices", None), *ask])
    trips = 1
    deadline = time.monotonic() + 30
    while True:
        trips += 1
        if shows_grow(before, _total(q), GiB, "amd64"):
            return trips
        if time.monotonic() > deadline:
            raise TimeoutError("the guest did not show the memory")
        time.sleep(0.001)


def _observe(q: QMPClient) -> int:
    """The devices and the guest's latest MemTotal, in one exchange: the MemTotal the
    grow is measured from."""
    _, stats = q.execute_all(
        [("query-memory-devices", None), ("qom-get", {"path": BALLOON, "property": "guest-stats"})]
    )
    return int(stats["stats"]["stat-total-memory"])


def confirmed_dimm(sock: Path) -> int:
    """:func:`baseline_dimm`, then a fresh reading of the guest that shows the memory."""
    with QMPClient(sock) as q:
        before = _observe(q)
        _plug(q)
        return 4 + _shows(q, before)


def confirmed_virtio(sock: Path) -> int:
    """:func:`baseline_virtio`, then a fresh reading of the guest that shows the memory."""
    with QMPClient(sock) as q:
        before = _observe(q)
        return 2 + _resize(q) + _shows(q, before)


def reset(sock: Path, boot_total: int) -> None:
    """Remove whatever is plugged (not timed)."""
    with QMPClient(sock) as q:
        for d in q.execute("query-memory-devices"):
            data: dict[str, Any] = d["data"]
            if d["type"] == "dimm":
                q.execute("device_del", {"id": data["id"]})
                q.wait_event("DEVICE_DELETED", timeout=30)
                q.execute("object-del", {"id": data["memdev"].removeprefix("/objects/")})
            elif d["type"] == "virtio-mem" and data["requested-size"]:
                q.execute(
                    "qom-set",
                    {
                        "path": f"/machine/peripheral/{data['id']}",
                        "property": "requested-size",
                        "value": 0,
                    },
                )
                wait_until(
                    lambda: all(
                        x["data"]["size"] == 0
                        for x in q.execute("query-memory-devices")
                        if x["type"] == "virtio-mem"
                    )
                )

        # Leave the guest's latest reading current (its MemTotal back at boot's), so that
        # the next round's client that takes it for the one before the plug is right.
        def current() -> bool:
            for v in (0, INTERVAL):
                q.execute(
                    "qom-set",
                    {"path": BALLOON, "property": "guest-stats-polling-interval", "value": v},
                )
            time.sleep(0.05)
            return _total(q) == boot_total

        wait_until(current)


def kata_mem_apply(sock: Path, cfg_path: Path, state: Path) -> tuple[int, int]:
    cfg = load_config(cfg_path)
    backends: list[QmpBackend] = []

    def connect() -> QmpBackend:
        backends.append(QmpBackend.connect(str(sock), dimm_backend=dimm_backend(cfg)))
        return backends[0]

    result = run_locked(SandboxState(state, "bench"), connect, cfg, HOST, REQUEST, Options())
    assert result.outcome.status == "Resized", result.outcome
    # + capabilities negotiation; commands sent together wait for one round trip
    return backends[0].commands + 1, backends[0].round_trips + 1


def run(mechanism: str, rounds: int, guest_dir: Path, work: Path) -> dict[str, Any]:
    virtio = mechanism == "virtio-mem"
    cfg = write_config(
        work / f"{mechanism}.toml",
        # shared_fs none: kata-mem plugs memory-backend-ram, as the baseline does (the
        # bench guest shares no file system; with virtio-fs it would be a /dev/shm file).
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "enable_virtio_mem": virtio,
            "shared_fs": "none",
        },
    )
    spec = GuestSpec(virtio_mem_mib=2048 if virtio else 0)
    sides = ("kata-mem", "baseline", "confirmed")
    times: dict[str, list[float]] = {side: [] for side in sides}
    trips: dict[str, tuple[int, int]] = {}
    clients = {
        "baseline": baseline_virtio if virtio else baseline_dimm,
        "confirmed": confirmed_virtio if virtio else confirmed_dimm,
    }
    with GuestVM(guest_dir, work / mechanism, spec) as vm:
        sock = vm.qmp_socket
        with QMPClient(sock) as q:
            q.execute(
                "qom-set",
                {"path": BALLOON, "property": "guest-stats-polling-interval", "value": INTERVAL},
            )
            time.sleep(2 * INTERVAL + 0.5)
            boot_total = _total(q)
        for i in range(rounds + 1):  # round 0 warms every path up and is not counted
            for side in sides[i % 3 :] + sides[: i % 3]:  # each side goes first in turn
                start = time.perf_counter()
                if side == "kata-mem":
                    trips[side] = kata_mem_apply(sock, cfg, work / "state")
                else:
                    n = clients[side](sock)
                    trips[side] = (n, n)
                elapsed = time.perf_counter() - start
                if i:
                    times[side].append(elapsed)
                reset(sock, boot_total)
    km, base, conf = (statistics.median(times[side]) for side in sides)
    return {
        "mechanism": mechanism,
        "kata": km,
        "base": base,
        "conf": conf,
        "ratio": km / base,
        "ratio_conf": km / conf,
        "trips": trips,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    # The state directory on tmpfs, as kata-mem's default /run/kata-mem is on a node (the
    # journal's fsyncs cost ~8 ms each on this machine's disk, and nothing on tmpfs).
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-", dir=SHM) as tmp:
        rows = [run(m, args.rounds, guest_dir, Path(tmp)) for m in ("pc-dimm", "virtio-mem")]
    print(f"{args.rounds} rounds per mechanism, the sides in turn, +1 GiB each, TCG guest\n")
    print(
        "| apply +1 GiB | kata-mem median | stdlib / + guest, medians | ratio to stdlib "
        "| ratio to stdlib + guest | QMP round trips, kata-mem (commands) / stdlib / + guest |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['mechanism']} | {r['kata'] * 1000:.1f} ms "
            f"| {r['base'] * 1000:.1f} / {r['conf'] * 1000:.1f} ms "
            f"| {r['ratio']:.2f} | {r['ratio_conf']:.2f} "
            f"| {'{1} ({0})'.format(*r['trips']['kata-mem'])} / {r['trips']['baseline'][0]} "
            f"/ {r['trips']['confirmed'][0]} |"
        )


if __name__ == "__main__":
    main()
