"""The planner's CPU sums and comparisons, done in integers, against the Fraction
arithmetic they replace: equal for every share a request, an annotation or a
configuration can carry (quotas and periods up to 2^63 - 1), not just the usual ones."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kata_mem.core.frozen import replace
from kata_mem.core.golang import round_float32
from kata_mem.core.model import (
    Container,
    Demand,
    HostFacts,
    PodResources,
    SizingConfig,
    Workload,
)
from kata_mem.core.planner import (
    ARCH_MAX_VCPUS,
    _peaks,
    _plan_vcpus,
    containers_peak,
    demand,
)
from kata_mem.core.units import INT64_MAX
from tests.strategies import configs, examples

#: Pure arithmetic, cheap: many examples, for equality over wide ranges.
MANY = settings(max_examples=examples(20))

_quota = st.integers(min_value=-(1 << 20), max_value=INT64_MAX)
_period = st.integers(min_value=1, max_value=INT64_MAX)
#: A share next to a whole number of CPUs (k - 1/d, k, k + 1/d), where a comparison
#: that is off by one would tell.
near_whole = st.builds(
    lambda k, d, delta: Fraction(k * d + delta, d),
    st.integers(min_value=0, max_value=600),
    st.integers(min_value=1, max_value=INT64_MAX),
    st.sampled_from([-1, 0, 1]),
)
#: A share as a request gives it (quota/period, anything from tiny to huge), or a small one.
shares = st.one_of(
    st.builds(Fraction, _quota, _period),
    st.fractions(min_value=-4, max_value=64, max_denominator=1000),
    st.integers(min_value=0, max_value=512).map(Fraction),
    near_whole,
)
wide_containers = st.builds(
    Container,
    name=st.just("c"),
    memory_limit=st.integers(min_value=-1, max_value=1 << 50),
    hugepages_limit=st.integers(min_value=0, max_value=1 << 40),
    cpu=shares,
    role=st.sampled_from(["app", "init", "sidecar"]),
    state=st.sampled_from(["running", "created", "stopped"]),
    cpuset_cpus=st.integers(min_value=-1, max_value=512),
)


def fraction_peaks(containers: tuple[Container, ...], cpu_of: object) -> tuple[int, Fraction]:
    """The peak as the planner computed it before, every CPU sum a Fraction."""
    sidecar_mem, sidecar_cpu = 0, Fraction(0)
    app_mem, app_cpu = 0, Fraction(0)
    init_mem, init_cpu = 0, Fraction(0)
    for c in containers:
        if c.state == "stopped":
            continue
        mem = max(max(c.memory_limit, 0) + max(c.hugepages_limit, 0), 0)
        cpu = cpu_of(c)  # type: ignore[operator]
        if c.role == "init":
            init_mem = max(init_mem, sidecar_mem + mem)
            init_cpu = max(init_cpu, sidecar_cpu + cpu)
        elif c.role == "sidecar":
            sidecar_mem += mem
            sidecar_cpu += cpu
        else:
            app_mem += mem
            app_cpu += cpu
    return max(init_mem, app_mem + sidecar_mem), max(init_cpu, app_cpu + sidecar_cpu)


@MANY
@given(st.lists(wide_containers, max_size=10).map(tuple))
def test_peaks_in_integers_equal_the_fraction_sums(containers: tuple[Container, ...]) -> None:
    assert _peaks(containers, lambda c: c.cpu) == fraction_peaks(containers, lambda c: c.cpu)


@MANY
@given(st.lists(wide_containers, max_size=10).map(tuple))
def test_containers_peak_equals_the_fraction_rule(containers: tuple[Container, ...]) -> None:
    mem, cpu = fraction_peaks(containers, lambda c: max(c.cpu, Fraction(0)))
    if cpu == 0:
        cpu = fraction_peaks(containers, lambda c: Fraction(max(c.cpuset_cpus, 0)))[1]
    got = containers_peak(containers)
    assert got == (mem, cpu)
    assert type(got[1]) is Fraction  # the model's type, whatever the shares were


@MANY
@given(
    configs(),
    st.integers(min_value=1, max_value=1024),
    st.sampled_from(sorted(ARCH_MAX_VCPUS)),
    st.fractions(min_value=0, max_value=2048, max_denominator=1 << 40),
    st.booleans(),
    st.data(),
)
def test_vcpus_compared_in_integers_as_in_fractions(
    cfg: SizingConfig, cpus: int, arch: str, work: Fraction, static: bool, data: st.DataObject
) -> None:
    """The boot vCPUs (``default_vcpus`` brought within the host, and the maximum unless
    sized statically) and the target, where the comparisons are now integer ones (the Go
    runtime's sizing, dynamic or static); the share often next to the very bounds it is
    compared with."""
    host = HostFacts(memory=1 << 34, cpus=cpus, arch=arch)  # type: ignore[arg-type]
    arch_cap = ARCH_MAX_VCPUS[arch]
    if cfg.default_maxvcpus == 0 or cfg.default_maxvcpus >= cpus:
        ceiling = cpus
    else:
        ceiling = cfg.default_maxvcpus
    ceiling = min(ceiling, arch_cap)
    usable = min(cpus, arch_cap)
    anchored = st.builds(
        lambda k, d, delta: Fraction(k * d + delta, d),
        st.sampled_from([usable, ceiling, 0]),
        st.integers(min_value=1, max_value=INT64_MAX),
        st.sampled_from([-1, 0, 1]),
    )
    default = data.draw(st.one_of(shares, anchored, anchored, anchored))
    cfg = replace(cfg, default_vcpus=default, static_sandbox_resource_mgmt=static, runtime="go")
    want = default
    if want < 0 or want > usable:
        want = Fraction(usable)
    elif want == 0:
        want = Fraction(1)
    # Added in float32, as Kata adds them (golang.round_float32: its own tests).
    summed = round_float32(want + round_float32(work))
    if static:  # booted with the workload, the maximum raised to it (within the arch)
        ceiling = min(max(math.ceil(summed), 1), arch_cap)
    elif want > ceiling:
        want = Fraction(ceiling)
        summed = round_float32(want + round_float32(work))
    plan, _ = _plan_vcpus(cfg, host, Demand(cpu=work))
    assert (plan.default, plan.requested) == (want, summed)
    assert plan.target == min(math.ceil(summed), ceiling)


@MANY
@given(configs(), st.lists(wide_containers, max_size=6).map(tuple), shares)
def test_a_pod_cpu_limit_bounds_as_in_fractions(
    cfg: SizingConfig, containers: tuple[Container, ...], pod_cpu: Fraction
) -> None:
    """Under a pod-level CPU limit the workload is that limit when a live container has
    no CPU limit of its own (a share of 0 or less), else the smaller of it and the peak."""
    workload = Workload(containers, pod=PodResources(cpu=pod_cpu, origin="pod"))
    live = [c for c in containers if c.state != "stopped"]
    peak = containers_peak(containers)[1]
    want = pod_cpu if live and any(c.cpu <= 0 for c in live) else min(pod_cpu, peak)
    assert demand(cfg, workload)[0].cpu == want


def _config(default: Fraction, maxvcpus: int, static: bool) -> SizingConfig:
    return SizingConfig(
        path="generated.toml",
        hypervisor="qemu",
        default_memory=2048 << 20,
        default_maxmemory=0,
        memory_slots=10,
        memory_offset=0,
        enable_virtio_mem=False,
        enable_hugepages=False,
        static_sandbox_resource_mgmt=static,
        default_vcpus=default,
        default_maxvcpus=maxvcpus,
    )


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("maxvcpus", [0, 4])
@pytest.mark.parametrize("above", [Fraction(1, 10**18), Fraction(1, 3), Fraction(1)])
def test_a_share_just_above_a_bound_is_brought_to_it(
    static: bool, maxvcpus: int, above: Fraction
) -> None:
    """``default_vcpus`` a hair above the host's 8 CPUs (or the maximum of 4) boots with
    8 (or 4), not the hair more: the boundaries the random shares seldom meet."""
    host = HostFacts(memory=1 << 34, cpus=8, arch="amd64")
    bound = 8 if static or maxvcpus == 0 else 4
    plan, _ = _plan_vcpus(_config(bound + above, maxvcpus, static), host, Demand())
    assert plan.default == bound
    plan, _ = _plan_vcpus(_config(Fraction(bound), maxvcpus, static), host, Demand())
    assert plan.default == bound
