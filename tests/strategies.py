"""Hypothesis strategies: the single home of generated configs, hosts and workloads."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import strategies as st

from kata_mem.model import Container, HostFacts, SandboxRequest, Settings, SizingConfig
from kata_mem.units import MiB

mib = st.integers(min_value=0, max_value=1 << 20).map(lambda n: n * MiB)


@st.composite
def configs(draw: st.DrawFn, mechanism: str | None = None) -> SizingConfig:
    mech = mechanism or draw(st.sampled_from(["pc-dimm", "virtio-mem", "static"]))
    return SizingConfig(
        path="generated.toml",
        hypervisor="qemu",
        default_memory=draw(st.integers(min_value=256, max_value=8192)) * MiB,
        default_maxmemory=draw(st.one_of(st.just(0), st.integers(min_value=256, max_value=1 << 17)))
        * MiB,
        memory_slots=draw(st.integers(min_value=1, max_value=256)),
        memory_offset=0,
        enable_virtio_mem=mech == "virtio-mem",
        enable_hugepages=False,
        static_sandbox_resource_mgmt=mech == "static",
        default_vcpus=Fraction(draw(st.integers(min_value=-1, max_value=8))),
        default_maxvcpus=draw(st.integers(min_value=0, max_value=512)),
        settings=Settings(
            dimm_block=draw(st.sampled_from([2, 64, 128, 256, 1024])) * MiB,
            virtio_mem_block=draw(st.sampled_from([1, 2, 4, 128])) * MiB,
        ),
    )


hosts = st.builds(
    HostFacts,
    memory=st.integers(min_value=512, max_value=1 << 22).map(lambda n: n * MiB),
    cpus=st.integers(min_value=1, max_value=512),
    arch=st.sampled_from(["amd64", "arm64", "ppc64le", "s390x"]),
)

limits = st.one_of(
    st.just(0),
    st.integers(min_value=-1, max_value=1 << 45),
    st.integers(min_value=0, max_value=1 << 16).map(lambda n: n * MiB),
)

containers = st.builds(
    Container,
    name=st.just("c"),
    memory_limit=limits,
    cpu=st.fractions(min_value=0, max_value=64, max_denominator=1000),
    role=st.sampled_from(["app", "app", "init", "sidecar"]),
    state=st.sampled_from(["running", "running", "created", "stopped"]),
)

requests = st.lists(containers, max_size=8).map(lambda cs: SandboxRequest(tuple(cs)))
