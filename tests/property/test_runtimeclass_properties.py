"""The computed RuntimeClass overhead against the guard itself, for every configuration:
with ``podFixed.memory`` from :func:`runtime_class_overhead`, the planner grows every pod
up to the maximum to its full VM in a pod cgroup sized as the kubelet sizes it (limits +
podFixed, rounded down to the kernel's page), with no clamp of the guard; a MiB less
clamps the pod that binds; and no pod between (byte by byte at every MiB, where the VM's
steps are) needs more."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kata_mem.core.frozen import replace
from kata_mem.core.model import (
    CgroupLevel,
    Container,
    Guards,
    HostCgroup,
    SizingConfig,
    SizingModel,
    Workload,
)
from kata_mem.core.plan import plan
from kata_mem.core.plan.guards import cgroup_room
from kata_mem.core.runtimeclass import _host, pod_fit, runtime_class_overhead
from kata_mem.core.units import MiB, align_down
from tests.strategies import configs, examples

#: The largest base page of each architecture's kernels (arm64 and ppc64le are built with
#: 64 KiB pages too): the kernel rounds a cgroup limit down to it (mm/page_counter.c).
PAGE_SIZE = {"amd64": 4096, "arm64": 65536, "ppc64le": 65536, "s390x": 4096, "riscv64": 4096}
arches = st.sampled_from(sorted(PAGE_SIZE))
models: st.SearchStrategy[SizingModel] = st.sampled_from(["kata", "pod-limit"])


@st.composite
def guarded_configs(draw: st.DrawFn) -> SizingConfig:
    cfg = draw(configs())
    return replace(
        cfg,
        settings=replace(
            cfg.settings,
            sizing=draw(models),
            vmm_overhead=draw(st.integers(0, 256)) * MiB,
            vmm_overhead_per_gib=draw(st.integers(0, 64)) * MiB,
            host_cgroup_margin=draw(st.integers(0, 64)) * MiB,
        ),
    )


def pod_cgroup(limit: int) -> Guards:
    level = CgroupLevel("/kubepods/pod", limit, None)
    return Guards(cgroup=HostCgroup("/kubepods/pod", 1, None, (level,)))


def grows_unclamped(cfg: SizingConfig, arch: str, limits: int, pod_fixed: int) -> bool:
    """Whether a pod of ``limits`` gets its whole VM from the planner, guarded by a pod
    cgroup of ``limits + pod_fixed`` (in whole pages), and that VM fits the guard's rule."""
    host = _host(arch)  # type: ignore[arg-type]
    limit = align_down(limits + pod_fixed, PAGE_SIZE[arch])
    guards = pod_cgroup(limit)
    pod = Workload(containers=(Container("pod", memory_limit=limits),))
    planned = plan(cfg, host, pod, guards=guards).memory
    room = cgroup_room(cfg, guards.cgroup, planned.base)  # type: ignore[arg-type]
    assert room is not None
    causes = {c.cause for c in planned.clamps}
    return (
        "host_cgroup" not in causes
        and planned.aligned == pod_fit(cfg, arch, limits).vm  # type: ignore[arg-type]
        and planned.aligned <= room[0]
    )


@given(
    cfg=guarded_configs(),
    arch=arches,
    most=st.integers(1, 1 << 37),
    data=st.data(),
)
def test_no_pod_up_to_the_maximum_is_clamped(
    cfg: SizingConfig, arch: str, most: int, data: st.DataObject
) -> None:
    found = runtime_class_overhead(cfg, arch, most)  # type: ignore[arg-type]
    assert found.memory % MiB == 0
    near = [found.binding.limits + d for d in (-1, 1, 4095, 4096, 65535, MiB - 1)]
    picks = [1, most, found.binding.limits, *(n for n in near if 1 <= n <= most)]
    picks += data.draw(st.lists(st.integers(1, most), max_size=5))
    for limits in picks:
        assert grows_unclamped(cfg, arch, limits, found.memory), limits


@given(cfg=guarded_configs(), arch=arches, most=st.integers(1, 1 << 37))
def test_a_mib_less_clamps_the_pod_that_binds(cfg: SizingConfig, arch: str, most: int) -> None:
    found = runtime_class_overhead(cfg, arch, most)  # type: ignore[arg-type]
    assume(found.memory > 0)
    assert not grows_unclamped(cfg, arch, found.binding.limits, found.memory - MiB)


@settings(deadline=None, max_examples=examples(0.5))
@given(
    cfg=guarded_configs(),
    arch=arches,
    boot=st.integers(256, 1024),
    block=st.sampled_from([1, 2, 64, 128, 256]),
    maximum=st.one_of(st.just(0), st.integers(0, 1536)),
    most=st.one_of(st.integers(1, 1536 * MiB), st.integers(1, 1536).map(lambda n: n * MiB)),
)
def test_no_pod_between_needs_more(
    cfg: SizingConfig, arch: str, boot: int, block: int, maximum: int, most: int
) -> None:
    """Every block is whole MiB, so the VM steps up one byte past a whole MiB of limits:
    each MiB, a byte before and a byte after, is every pod that can need the most. The
    configurations are small (boot and maximum within reach of ``most``, blocks often
    large and the maximum seldom on one), so that the steps, the boot floor, the last
    block under the maximum and the maximum itself fall in the range searched."""
    cfg = replace(
        cfg,
        default_memory=boot * MiB,
        default_maxmemory=maximum and (boot + maximum) * MiB,
        settings=replace(
            cfg.settings, dimm_block=max(block, 2) * MiB, virtio_mem_block=block * MiB
        ),
    )
    found = runtime_class_overhead(cfg, arch, most)  # type: ignore[arg-type]
    worst = max(
        (
            pod_fit(cfg, arch, n)  # type: ignore[arg-type]
            for k in range(most // MiB + 1)
            for n in (k * MiB - 1, k * MiB, k * MiB + 1)
            if 1 <= n <= most
        ),
        key=lambda f: f.pod_fixed,
    )
    assert found.binding.pod_fixed == worst.pod_fixed, worst
