#!/usr/bin/env python3
"""The end-to-end demo (run by scripts/demo): a real tiny guest under QEMU, sized and
resized by kata-mem, with the guest's own MemTotal shown at each step."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402

CONFIG = ROOT / "configs" / "configuration-demo.toml"
PODS = ROOT / "examples" / "pods"


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def kata_mem(*args: str) -> None:
    cmd = [str(Path(sys.executable).parent / "kata-mem"), *args]
    print("$ kata-mem " + " ".join(a if " " not in a else repr(a) for a in args), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(r.stdout.rstrip())
    if r.stderr.strip():
        print(r.stderr.rstrip())
    print(f"(exit {r.returncode})")


def main() -> None:
    guest_dir = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".cache" / "guest")
    with (
        tempfile.TemporaryDirectory(prefix="kata-mem-demo-") as tmp,
        GuestVM(guest_dir, Path(tmp) / "vm", GuestSpec(virtio_mem_mib=3072)) as vm,
    ):
        qmp = (
            "--qmp",
            str(vm.qmp_socket),
            "--state-dir",
            str(Path(tmp) / "state"),
            "--sandbox",
            "demo",
        )

        def memtotal(note: str) -> None:
            m = vm.status()
            print(
                f"-> guest MemTotal {m.total_kb // 1024} MiB, MemAvailable {m.avail_kb // 1024} MiB ({note})",
                flush=True,
            )

        say("a real guest: QEMU (TCG) with 512 MiB at boot and a 3 GiB virtio-mem device")
        memtotal(f"booted in {vm.boot_seconds:.1f} s")

        say("preview: what kata-mem would do for the two-containers pod (changes nothing)")
        kata_mem("preview", "--config", str(CONFIG), "--pod", str(PODS / "two-containers.yaml"))

        say("apply the two-containers pod: the guest grows by its limits")
        kata_mem("apply", "--config", str(CONFIG), *qmp, "--pod", str(PODS / "two-containers.yaml"))
        memtotal("after growing")

        say(
            "apply the memory-boom pod (a 1000Gi limit): clamped to default_maxmemory, and the pod starts"
        )
        kata_mem("apply", "--config", str(CONFIG), *qmp, "--pod", str(PODS / "memory-boom.yaml"))
        memtotal("at the clamped maximum")

        say("the workload now holds 1500 MiB; its limit drops to 256Mi and a shrink is asked for")
        vm.alloc(1500)
        memtotal("holding 1500 MiB")
        kata_mem("apply", "--config", str(CONFIG), *qmp, "--limit", "256Mi", "--allow-shrink")
        memtotal("unchanged: the shrink was deferred, the guest is safe")

        say("the workload frees its memory; the same shrink is asked for again")
        vm.free()
        kata_mem("apply", "--config", str(CONFIG), *qmp, "--limit", "256Mi", "--allow-shrink")
        vm.wait_mem(lambda m: m.total_kb < 900 * 1024, timeout=15)
        memtotal("after shrinking in verified steps")

        say("what the hypervisor and the guest report now")
        kata_mem("status", *qmp)
    say("done: the guest was stopped and its files removed")


if __name__ == "__main__":
    main()
