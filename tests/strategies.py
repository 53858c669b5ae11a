"""Hypothesis strategies: the single home of generated configs, hosts, workloads, requests
and mutated inputs; and the example counts of tests that are not like most."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from kata_mem.core.arch import HUGEPAGE_SIZES
from kata_mem.core.endpoint import LIBVIRT_URIS, Endpoint, VmmIdentity
from kata_mem.core.model import (
    ARCHES,
    RUNTIMES,
    SANDBOX_ID,
    Container,
    HostFacts,
    PodResources,
    Runtime,
    SandboxSizing,
    Settings,
    SizingConfig,
    Workload,
)
from kata_mem.core.request import (
    EVENTS,
    MIN_HOST_MEMORY,
    ROLES,
    STATES,
    HostOverrides,
    SandboxRequest,
)
from kata_mem.core.sandbox_resources import SandboxResize, SandboxResources
from kata_mem.core.units import INT64_MAX, MiB

mib = st.integers(min_value=0, max_value=1 << 20).map(lambda n: n * MiB)


@st.composite
def configs(draw: st.DrawFn, mechanism: str | None = None) -> SizingConfig:
    """A configuration: pc-dimm or virtio-mem, sized at boot by Kata or not (static sizing
    is a sizing rule on either mechanism), of the Go runtime or runtime-rs."""
    mech = mechanism or draw(st.sampled_from(["pc-dimm", "virtio-mem"]))
    static = draw(st.booleans())
    # runtime-rs boots a static VM at overhead_memory + the workload: never 0 MiB here
    # (runtime-rs refuses it, a configuration error of its own test).
    runtime: Runtime = draw(st.sampled_from(RUNTIMES))
    overhead = draw(st.sampled_from([32, 128, 512])) * MiB if runtime == "runtime-rs" else None
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
        static_sandbox_resource_mgmt=static,
        default_vcpus=Fraction(draw(st.integers(min_value=-1, max_value=8))),
        default_maxvcpus=draw(st.integers(min_value=0, max_value=512)),
        settings=Settings(
            dimm_block=draw(st.sampled_from([2, 64, 128, 256, 1024])) * MiB,
            virtio_mem_block=draw(st.sampled_from([1, 2, 4, 128])) * MiB,
        ),
        runtime=runtime,
        overhead_memory=overhead,
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

workloads = st.lists(containers, max_size=8).map(lambda cs: Workload(tuple(cs)))

#: Text a request may carry: UTF-8 (no lone surrogates), no NUL.
request_text = st.text(
    st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=8
)
#: A path a request may name (its configuration, QMP socket, host cgroup): absolute.
request_path = request_text.map(lambda text: "/" + text)
_int63 = st.integers(min_value=0, max_value=INT64_MAX)


#: The VMM a saved request's QMP socket led to (what SO_PEERCRED and stat(2) give).
vmm_identities = st.builds(
    VmmIdentity,
    st.integers(min_value=0, max_value=(1 << 64) - 1),
    st.integers(min_value=0, max_value=(1 << 64) - 1),
    st.integers(min_value=0, max_value=(1 << 32) - 1),
    st.integers(min_value=0, max_value=(1 << 32) - 1),
    st.none() | st.integers(min_value=1, max_value=(1 << 31) - 1),
)


@st.composite
def sandbox_requests(draw: st.DrawFn) -> SandboxRequest:
    """Requests as :meth:`SandboxRequest.from_json` returns them: every field in its range,
    origins as the reader names them, CRI sizing as the annotations say it."""
    names = draw(st.lists(request_text, unique=True, max_size=3))  # each container once
    containers = tuple(
        Container(
            name,
            draw(_int63),
            draw(_int63),
            Fraction(draw(_int63), draw(st.integers(min_value=1, max_value=INT64_MAX))),
            draw(st.sampled_from(ROLES)),
            draw(st.sampled_from(STATES)),
            f"request containers[{i}]",
            draw(st.integers(min_value=0, max_value=4096)),
        )
        for i, name in enumerate(names)
    )
    sizing = draw(
        st.none()
        | st.builds(
            lambda memory, quota, period: SandboxSizing(
                memory, Fraction(quota, period), "request annotations"
            ),
            _int63,
            _int63,
            st.integers(min_value=1, max_value=(1 << 64) - 1),
        )
    )
    endpoint = draw(
        st.none()
        | st.builds(Endpoint, st.just("qmp"), request_path, vmm=st.none() | vmm_identities)
        | st.builds(Endpoint, st.just("libvirt"), st.sampled_from(LIBVIRT_URIS), request_text)
    )
    event = draw(st.sampled_from(EVENTS))
    arch = draw(st.none() | st.sampled_from(ARCHES))
    # A hugepage size of the architecture, or of any while it is not given.
    sizes = (
        HUGEPAGE_SIZES[arch] if arch else sorted({s for v in HUGEPAGE_SIZES.values() for s in v})
    )
    page = draw(st.sampled_from(sizes))
    pool = st.tuples(st.integers(min_value=0, max_value=(1 << 63) // page), st.just(page))
    host = HostOverrides(
        memory=draw(st.none() | st.integers(min_value=MIN_HOST_MEMORY, max_value=INT64_MAX)),
        cpus=draw(st.none() | st.integers(min_value=1, max_value=INT64_MAX)),
        arch=arch,
        hugepages=draw(st.none() | pool),
    )
    pod = draw(
        st.none()
        | st.builds(
            lambda memory, cpu, hugepages: PodResources(
                memory, cpu, hugepages, "request pod_resources"
            ),
            st.none() | st.integers(min_value=1, max_value=INT64_MAX),
            st.none()
            | st.builds(
                Fraction,
                st.integers(min_value=1, max_value=INT64_MAX),
                st.integers(min_value=1, max_value=INT64_MAX),
            ),
            st.none() | st.integers(min_value=1, max_value=INT64_MAX),
        )
    )
    hypervisor = tuple(
        draw(
            st.dictionaries(
                st.sampled_from(["default_memory", "memory_slots", "default_vcpus"]).map(
                    lambda k: "io.katacontainers.config.hypervisor." + k
                ),
                request_text,
                max_size=2,
            )
        ).items()
    )
    workload = Workload(
        containers,
        sizing,
        pod=pod,
        hypervisor=hypervisor,
        hypervisor_origin="request annotations" if hypervisor else "",
    )
    resize = None
    if event == "update-sandbox" or (event == "reconcile" and draw(st.booleans())):
        resources = st.builds(SandboxResources, _int64, _int64, _uint63)
        overhead = st.builds(SandboxResources, _uint63, _int64, _uint63)  # a size: not negative
        resize = SandboxResize(draw(resources), draw(overhead))
        workload = resize.workload()
    return SandboxRequest(
        sandbox=draw(st.from_regex(SANDBOX_ID, fullmatch=True)),
        event=event,
        config=draw(st.none() | request_path),
        workload=workload,
        resize=resize,
        endpoint=endpoint,
        # A request that applies names its VM; a delete event is the delete mode.
        mode="delete"
        if event == "delete"
        else ("apply" if endpoint is not None and draw(st.booleans()) else "plan"),
        allow_shrink=draw(st.booleans()),
        host=host,
    )


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """A few random byte flips, insertions and deletions of ``data``."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        pos = draw(st.integers(min_value=0, max_value=max(len(buf) - 1, 0)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "flip" and buf:
            buf[pos] = draw(st.integers(min_value=0, max_value=255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and buf:
            del buf[pos]
        else:
            del buf[pos:]
    return bytes(buf)


_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_uint63 = st.integers(min_value=0, max_value=2**63 - 1)
_valid_containers = st.fixed_dictionaries(
    {"id": st.text(min_size=1, max_size=6).filter(lambda t: "\0" not in t)},
    optional={
        "state": st.sampled_from(["running", "created", "stopped"]),
        "role": st.sampled_from(["app", "init", "sidecar"]),
        "memory_limit_bytes": st.one_of(st.none(), _int64),
        "hugepages_limit_bytes": st.one_of(st.none(), _uint63),
        "cpu_quota": st.one_of(st.none(), _int64),
        "cpu_period": st.one_of(st.none(), _uint63),
    },
)
_resources = st.fixed_dictionaries(
    {},
    optional={
        "memory_limit_bytes": st.one_of(st.none(), _int64),
        "cpu_quota": st.one_of(st.none(), _int64),
        "cpu_period": st.one_of(st.none(), _uint63),
    },
)
#: An overhead is a size: never negative.
_overhead = st.fixed_dictionaries(
    {},
    optional={
        "memory_limit_bytes": st.one_of(st.none(), _uint63),
        "cpu_quota": st.one_of(st.none(), _int64),
        "cpu_period": st.one_of(st.none(), _uint63),
    },
)
#: ``update-sandbox`` request documents (CRI UpdatePodSandboxResources) that the shipped
#: schema and the reader accept.
valid_sandbox_updates: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {
        "schema": st.just("kata-mem/shim-request/v1"),
        "sandbox_id": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True),
        "event": st.sampled_from(["update-sandbox", "reconcile"]),
        "sandbox_resources": _resources,
    },
    optional={
        "overhead": st.one_of(st.none(), _overhead),
        "containers": st.just([]),
        "allow_shrink": st.booleans(),
    },
)
#: Shim request documents (JSON values) that the shipped schema and the reader accept.
valid_requests = st.fixed_dictionaries(
    {
        "schema": st.just("kata-mem/shim-request/v1"),
        "sandbox_id": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True),
        "event": st.sampled_from(["create", "update", "delete", "reconcile"]),
    },
    optional={
        "containers": st.lists(_valid_containers, max_size=3, unique_by=lambda c: c["id"]),
        "backend": st.one_of(
            st.none(), st.just({"type": "qmp", "socket": "/nonexistent/qmp.sock"})
        ),
        "allow_shrink": st.booleans(),
        "host": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "memory_bytes": st.integers(min_value=2**20, max_value=2**63 - 1),
                    "cpus": st.integers(min_value=1, max_value=512),
                },
            ),
        ),
        "annotations": st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(["io.kubernetes.cri.sandbox-memory", "x"]),
                st.from_regex(r"[0-9]{1,12}", fullmatch=True),
                max_size=2,
            ),
        ),
    },
).map(lambda d: {**d, "apply": d.get("backend") is not None and d["event"] != "delete"}) | (
    valid_sandbox_updates
)


def examples(times: float) -> int:
    """``times`` the examples per test of the loaded hypothesis profile (tests/conftest.py),
    at least 1: for a test whose examples cost much less (more) than most."""
    return max(1, round(settings().max_examples * times))


# Kata's configuration files, drop-in sets and per-pod annotations, as the Kata oracle
# cases (tests/fixtures/kata-cases) were generated: valid, boundary and hostile values of
# each key kata-mem reads (kata_mem/edges/config.py), written as TOML text.

#: Paths every generated [hypervisor.NAME] table names, as Kata's packaged files do (Kata
#: resolves them when it loads the file; kata-mem does not read them).
KATA_PATHS = (
    'path = "/opt/kata/bin/qemu-system-x86_64"',
    'kernel = "/opt/kata/share/kata-containers/vmlinux.container"',
    'image = "/opt/kata/share/kata-containers/kata-containers.img"',
    'virtio_fs_daemon = "/opt/kata/libexec/virtiofsd"',
)
_UINT32 = (1 << 32) - 1
_INT64 = (1 << 63) - 1
#: TOML literals: written as they are.
_anything = st.sampled_from(
    ['"2048"', "true", "1.5", "[]", "{}", '""', "-1", "1e3", "nan", "inf", "2048.0"]
)


def _ints(*special: int, low: int = -2, high: int = _INT64) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(special), st.integers(min_value=low, max_value=high)).map(str)


#: Each sizing key of [hypervisor.NAME]: its values as TOML text.
KATA_HYPERVISOR_VALUES: dict[str, st.SearchStrategy[str]] = {
    "default_memory": _ints(0, 1, 255, 256, 257, 2048, _UINT32, _UINT32 + 1, -1) | _anything,
    "default_maxmemory": _ints(0, 255, 256, 1024, 4096, 24104, 24105, 24106, 1 << 40, _INT64)
    | _anything,
    "memory_slots": _ints(0, 1, 10, 255, 256, 300, _UINT32, _UINT32 + 1) | _anything,
    "memory_offset": _ints(0, 1, 1024, _UINT32 + 1, _INT64) | _anything,
    "enable_virtio_mem": st.sampled_from(["true", "false"]) | _anything,
    "enable_hugepages": st.sampled_from(["true", "false"]) | _anything,
    "default_vcpus": st.one_of(
        _ints(0, 1, 2, 3, -1, -5, 240, 241, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, low=-300),
        st.sampled_from(
            [
                "0.5",
                "1.5",
                "2.0",
                "2.00000001",
                "1.0000001",
                "-0.5",
                "0.0",
                "1e-40",
                "3.4e38",
                "3.5e38",
                "1e39",
                "-inf",
                "inf",
                "nan",
                "+2.5",
                "1_0.5",
                "2.5e0",
            ]
        ),
        st.floats(min_value=-4, max_value=300, allow_nan=False).map(repr),
    )
    | _anything,
    "default_maxvcpus": _ints(0, 1, 2, 3, 239, 240, 241, _UINT32, _UINT32 + 1) | _anything,
    "enable_annotations": st.lists(
        st.sampled_from(
            [
                ".*",
                "default_memory",
                "^default_memory$",
                "memory",
                "default_(memory",
                "vcpus",
                "enable_.*",
                "[[:lower:]_]+",
                "(?=x)",
                "shared_fs",
                "memory_slots|memory_offset",
            ]
        ),
        max_size=3,
    ).map(lambda ps: "[" + ", ".join(f'"{p}"' for p in ps) + "]")
    | _anything,
    "shared_fs": st.sampled_from(
        [
            '"virtio-fs"',
            '"virtio-9p"',
            '"virtio-fs-nydus"',
            '"none"',
            '""',
            '"inline-virtio-fs"',
            '"nfs"',
        ]
    )
    | _anything,
}
#: [runtime] static_sandbox_resource_mgmt.
KATA_STATIC_VALUES = st.sampled_from(["true", "false"]) | _anything
#: Names of drop-in files: sorted by byte, dot files and any suffix included.
_dropin_names = st.sampled_from(
    ["10-a.toml", "20-b.toml", "9-c.toml", "50.conf", ".hidden", "Z.toml", "a b.toml", "zz"]
)


@st.composite
def _kata_table(draw: st.DrawFn, name: str, main: bool, hostile: bool) -> str:
    keys = draw(st.lists(st.sampled_from(sorted(KATA_HYPERVISOR_VALUES)), unique=True, max_size=5))
    lines = [f"[hypervisor.{name}]"]
    if main:
        lines += KATA_PATHS
    for key in keys:
        value = draw(KATA_HYPERVISOR_VALUES[key])
        if not hostile and value.startswith(("{", "[]", '"2')) and key != "enable_annotations":
            continue  # the hostile values of a key are drawn only for hostile sets
        lines.append(f"{key} = {value}")
    if draw(st.booleans()):
        lines += ["[runtime]", f"static_sandbox_resource_mgmt = {draw(KATA_STATIC_VALUES)}"]
    return "\n".join(lines) + "\n"


@st.composite
def kata_config_sets(draw: st.DrawFn) -> dict[str, Any]:
    """A Kata configuration file and its ``config.d`` drop-ins as text: ``files`` (name,
    text; ``configuration.toml`` first), ``dirs`` (directories among the drop-ins)."""
    hostile = draw(st.booleans())
    names = st.sampled_from(["qemu", "qemu", "qemu", "clh", "stratovirt", "remote", "foo"])
    main = draw(names) if hostile else "qemu"
    files = [{"name": "configuration.toml", "text": draw(_kata_table(main, True, hostile))}]
    for dropin in draw(st.lists(_dropin_names, unique=True, max_size=3)):
        name = draw(st.sampled_from([main, main, main, "clh"])) if hostile else main
        text = draw(_kata_table(name, False, hostile))
        if hostile:
            text = draw(
                st.sampled_from(
                    [
                        text,
                        text,
                        "",
                        "# nothing\n",
                        "[hypervisor.qemu\n",
                        f"[hypervisor.{name}]\n",
                        f"[hypervisor.{name}]\nnot_a_kata_key = 1\n",
                        "[kata_mem]\nallow_shrink = true\n",
                        f"hypervisor.{name}.default_memory = 4096\n",
                    ]
                )
            )
        files.append({"name": f"config.d/{dropin}", "text": text})
    dirs = ["config.d/sub"] if hostile and draw(st.integers(0, 9)) == 0 else []
    return {"files": files, "dirs": dirs}


#: Kata's hypervisor annotations kata-mem reads or checks, each with its values.
_go_uints = st.one_of(
    st.integers(min_value=0, max_value=1 << 66).map(str),
    st.sampled_from(
        [
            "0",
            "255",
            "256",
            "2048",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "007",
            "+1",
            "-1",
            "1_0",
            "0x10",
            " 1",
            "1 ",
            "",
            "1e3",
            "2 GiB",
            "1.0",
        ]
    ),
)
_go_floats = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "2",
            "3",
            "0.5",
            "1.5",
            "2.0",
            "2.00000001",
            "2.0000002",
            "2.000001",
            "-1",
            "-0",
            "0x1p1",
            "0x1.8p0",
            "1_0.5",
            "Inf",
            "+inf",
            "infinity",
            "NaN",
            "nan",
            "1e39",
            "3.4028235e38",
            "",
            " 1",
            "1e-50",
            ".5",
            "5.",
            "0b1",
            "1,5",
        ]
    ),
    st.floats(min_value=0, max_value=4, allow_nan=False).map(repr),
)
_go_bools = st.sampled_from(
    ["true", "false", "1", "0", "t", "F", "TRUE", "True", "tRUE", "yes", "", " true"]
)
KATA_ANNOTATION_VALUES: dict[str, st.SearchStrategy[str]] = {
    "default_memory": _go_uints,
    "memory_slots": _go_uints,
    "memory_offset": _go_uints,
    "default_vcpus": _go_floats,
    "default_max_vcpus": _go_uints,
    "enable_virtio_mem": _go_bools,
    "enable_hugepages": _go_bools,
    "enable_mem_prealloc": _go_bools,
    "reclaim_guest_freed_memory": _go_bools,
    "enable_guest_swap": _go_bools,
    "shared_fs": st.sampled_from(["virtio-fs", "virtio-9p", "virtio-fs-nydus", "none", "", "9p"]),
    "kernel_params": st.sampled_from(["quiet", ""]),
}
_go_ints = st.one_of(
    st.integers(min_value=-(1 << 64), max_value=1 << 64).map(str),
    st.sampled_from(
        [
            "0",
            "-1",
            "100000",
            "150000",
            "+5",
            "007",
            "",
            "1_000",
            " 1",
            "1.5",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "4503599627370496",
            "4503599627370495",
            "1073741824",
            "1048575",
            "1048576",
            "x",
        ]
    ),
)
#: containerd's CRI sandbox-sizing annotations, each with its values.
CRI_SIZING_VALUES: dict[str, st.SearchStrategy[str]] = {
    "io.kubernetes.cri.sandbox-memory": _go_ints,
    "io.kubernetes.cri.sandbox-cpu-quota": _go_ints,
    "io.kubernetes.cri.sandbox-cpu-period": _go_ints | st.sampled_from(["100000", "3"]),
    "io.kubernetes.cri.sandbox-cpu-shares": _go_ints | st.sampled_from(["1024", "2", "1025"]),
}


@st.composite
def kata_sandbox_annotations(draw: st.DrawFn) -> dict[str, str]:
    """The annotations of a sandbox's OCI spec: Kata's hypervisor ones and containerd's
    CRI sandbox sizing, each key drawn with its own values."""
    hv = draw(st.lists(st.sampled_from(sorted(KATA_ANNOTATION_VALUES)), unique=True, max_size=3))
    cri = draw(st.lists(st.sampled_from(sorted(CRI_SIZING_VALUES)), unique=True, max_size=4))
    out = {"io.katacontainers.config.hypervisor." + k: draw(KATA_ANNOTATION_VALUES[k]) for k in hv}
    out.update({k: draw(CRI_SIZING_VALUES[k]) for k in cri})
    return out


@st.composite
def kata_sandbox_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A configuration Kata loads, for a sandbox's annotations: QEMU or Cloud Hypervisor,
    sized at boot or not, its ``enable_annotations`` mostly allowing the sizing ones."""
    name = draw(st.sampled_from(["qemu", "qemu", "qemu", "clh"]))
    patterns = draw(
        st.sampled_from(
            [
                '[".*"]',
                '[".*"]',
                '["default_.*", "memory_.*", "enable_.*", "shared_fs"]',
                '["^default_memory$", "vcpus"]',
                "[]",
                '["default_(memory", ".*"]',
            ]
        )
    )
    lines = [f"[hypervisor.{name}]", *KATA_PATHS, f"enable_annotations = {patterns}"]
    for key, values in (
        ("default_memory", st.sampled_from(["0", "255", "256", "2048", "4294967295"])),
        ("default_vcpus", st.sampled_from(["0", "1", "1.5", "-1", "2.00000001", "0.1", "3"])),
        ("default_maxvcpus", st.sampled_from(["0", "1", "2", "3", "300"])),
        ("memory_slots", st.sampled_from(["0", "1", "300"])),
        ("memory_offset", st.sampled_from(["0", "1024"])),
    ):
        if draw(st.booleans()):
            lines.append(f"{key} = {draw(values)}")
    static = draw(st.sampled_from(["true", "false"]))
    lines += ["[runtime]", f"static_sandbox_resource_mgmt = {static}"]
    return {"files": [{"name": "configuration.toml", "text": "\n".join(lines) + "\n"}]}
