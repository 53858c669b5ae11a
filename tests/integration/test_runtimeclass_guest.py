"""The computed RuntimeClass on a real guest: the test guest's QEMU (512 MiB
at boot, virtio-mem, sized the way Kata sizes it: ``default_memory`` + limits) started
in a real memory cgroup (v1 on this machine; the harness makes and removes it:
tests/support/memcg.py) limited as the kubelet limits a pod's cgroup: the pod's memory
limits + the ``podFixed.memory`` that ``kata-mem runtimeclass`` computed. The pod is the
one the command says needs the most, so its cgroup is the tightest any pod up to the
maximum gets. ``kata-mem apply`` grows the VM to that pod's full size with no clamp, the
guest fills all it has, and QEMU lives (``oom_kill 0``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import kata_mem_process
from tests.support.configs import guest_config
from tests.support.guestvm import GuestSpec
from tests.support.memcg import CgroupGuestVM, CgroupUnavailable, MemoryCgroup

pytestmark = pytest.mark.guest
MiB, KiB_PER_MiB = 1 << 20, 1024
#: The largest pod the RuntimeClass is for: its VM (512 + 1024 MiB) fits the guest's
#: virtio-mem device and fills in seconds under TCG.
MAX_POD = "1Gi"
PAGE = 4096  # the kernel keeps a cgroup limit in pages, rounded down (mm/page_counter.c)


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    r = kata_mem_process(*args, "--json")
    assert r.stdout.strip(), r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, doc


def test_the_pod_that_needs_the_most_gets_its_whole_vm_and_qemu_lives(
    guest_dir: Path, tmp_path: Path
) -> None:
    # vmm_overhead_mib = 128: TCG's translation buffer adds ~46-48 MiB to what QEMU holds
    # beyond guest RAM (docs, "VMM overhead, measured here"); KVM nodes keep 64.
    cfg = guest_config(tmp_path, virtio=True, vmm_overhead_mib=128)
    code, rc = run_json("runtimeclass", "--config", str(cfg), "--max-pod-memory", MAX_POD)
    assert code == 0, rc
    pod = rc["pods"]["binding"]
    limits, pod_fixed = pod["limits_bytes"], rc["pod_fixed_memory_bytes"]
    # Kata's sizing: 512 + limits, in 2 MiB blocks; the pod one byte past 1022 MiB binds.
    assert (limits, pod["vm_bytes"]) == (1022 * MiB + 1, 1536 * MiB), pod
    try:
        cg = MemoryCgroup.create("kata-mem-runtimeclass")
    except CgroupUnavailable as exc:
        pytest.skip(f"no memory cgroup for QEMU: {exc}")
    with cg:
        cg.set_limit(limits + pod_fixed)  # what the kubelet writes for this pod
        assert cg.limit() == (limits + pod_fixed) // PAGE * PAGE
        vm = CgroupGuestVM(
            guest_dir, tmp_path / "guest", GuestSpec(virtio_mem_mib=2048), cgroup=cg
        ).start()
        try:
            base_kb = vm.status().total_kb
            code, doc = run_json(
                "apply",
                *("--config", str(cfg), "--qmp", str(vm.qmp_socket), "--sandbox", "pod"),
                *("--limit", str(limits), "--host-memory", "16Gi"),
                *("--host-cpus", "4", "--host-arch", "amd64"),
            )
            m = doc["plan"]["memory"]
            assert (code, doc["status"]) == (0, "Resized"), doc
            assert m["clamped_by"] == [], m
            assert m["target_mib"] == pod["vm_bytes"] // MiB
            hc = m["host_cgroup"]
            assert (hc["path"], hc["version"]) == (str(cg.path), cg.version), hc
            grown = vm.wait_mem(
                lambda s: s.total_kb >= base_kb + (m["target_mib"] - 512) * KiB_PER_MiB,
                timeout=30,
            )
            filled = grown.avail_kb // KiB_PER_MiB - 56  # the guest allocator keeps 48 MiB
            assert vm.alloc(filled).startswith("OK alloc")
            # alloc answers once the guest has touched every page, each charged to QEMU.
            assert vm.is_alive() and vm.status().held_mib == filled
            charge, kills = cg.usage(), cg.oom_kills()
            print(
                f"pod limits {limits} B + podFixed {pod_fixed // MiB} MiB: VM {m['target_mib']} "
                f"MiB (guest MemTotal {grown.total_kb // KiB_PER_MiB} MiB), filled {filled} "
                f"MiB, QEMU charged {charge // MiB} of {cg.limit() // MiB} MiB, oom_kill {kills}"
            )
            assert kills == 0
            assert charge <= cg.limit()
        finally:
            vm.stop()
