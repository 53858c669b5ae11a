"""Hypothesis strategies: the single home of generated configs, hosts, workloads, requests
and mutated inputs; and the example counts of tests that are not like most."""

from __future__ import annotations

import json
import random
import re
import struct
from fractions import Fraction
from typing import Any, Optional

from hypothesis import settings
from hypothesis import strategies as st

from kata_mem.core import gosyntax
from kata_mem.core.arch import HUGEPAGE_SIZES
from kata_mem.core.endpoint import LIBVIRT_URIS, Endpoint, VmmIdentity
from kata_mem.core.golang import round_float32
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


# -- the oracles' inputs (tests/oracle): Go's and Kubernetes' syntax, valid, at the
# boundaries, and hostile ---------------------------------------------------------------


def _with_underscores(draw: st.DrawFn, digits: str) -> str:
    """``digits`` with a few underscores put in, anywhere (underscoreOK decides)."""
    if not digits or draw(st.integers(min_value=0, max_value=7)) != 0:
        return digits
    at = draw(st.integers(min_value=0, max_value=len(digits)))
    return digits[:at] + draw(st.sampled_from(["_", "__"])) + digits[at:]


_dec_digits = st.text("0123456789", max_size=12) | st.text("0", max_size=900).map(lambda z: z + "1")
_hex_digits = st.text("0123456789abcdefABCDEF", max_size=10)
_signs = st.sampled_from(["", "", "+", "-"])


#: Patterns at Go's limits, and the code Go refuses each with (None: Go compiles it),
#: each answer Go 1.26.8's (tests/oracle/test_golang_oracle.py asks Go again). A limit's error
#: names the whole pattern (parse.go ``parse``: ``&Error{Code: ErrLarge, Expr: s}``).
GO_REGEXP_LIMITS: list[tuple[str, str, Optional[str]]] = [
    # maxHeight 1000: a capture is one level above what it holds.
    ("captures-999-deep", "(" * 999 + "a" + ")" * 999, None),
    ("captures-1000-deep", "(" * 1000 + "a" + ")" * 1000, gosyntax.ERR_NESTING_DEPTH),
    ("captures-1001-deep", "(" * 1001 + "a" + ")" * 1001, gosyntax.ERR_NESTING_DEPTH),
    # A non-capturing group is no level of its own: Go builds no node for it.
    ("groups-5000-deep", "(?:" * 5000 + "a" + ")" * 5000, None),
    ("flag-groups-1001-deep", "(?i:" * 1001 + "a" + ")" * 1001, None),
    # A repetition is a level.
    ("stars-1200-deep", "(?:" * 1200 + "a*" + ")*" * 1200, gosyntax.ERR_NESTING_DEPTH),
    ("quests-1200-deep", "(?:" * 1200 + "a" + ")?" * 1200, gosyntax.ERR_NESTING_DEPTH),
    # Alternatives of single runes are one class (factor, round 3): no level.
    ("rune-alternations-1200-deep", "(?:a|" * 1200 + "b" + ")" * 1200, None),
    (
        "captured-alternations-1001-deep",
        "(a|" * 1001 + "b" + ")" * 1001,
        gosyntax.ERR_NESTING_DEPTH,
    ),
    ("a-deep-group-never-closed", "(" * 1001 + "a", gosyntax.ERR_MISSING_PAREN),
    # maxSize, 3355443 instructions: 3355 x 1000 fit, 3356 x 1000 do not.
    ("size-at-the-limit", "(?:" + "a" * 3355 + "){1000}", None),
    ("size-above-the-limit", "(?:" + "a" * 3356 + "){1000}", gosyntax.ERR_LARGE),
    # maxRunes, 33554432 runes in classes: \pL is 659 ranges, 1318 runes, in Go 1.26.
    ("runes-at-the-limit", "\\pL" * 25458, None),
    ("runes-above-the-limit", "\\pL" * 25459, gosyntax.ERR_LARGE),
]


#: Pieces the corpus is made of: every kind of token the parser reads, and the ones that
#: fold (k, K, the Kelvin sign, the long s), so that literals merge and alternations factor.
GO_REGEXP_TOKENS = [
    "(", ")", "(?:", "(?i)", "(?i:", "(?P<n>", "(?<n>", "(?P<>", "|", "*", "+", "?", "{2}",
    "{1,3}", "{1000}", "{2,}", "{,3}", "{", "}", "{01}", "[", "]", "[^", "-", "a", "b", "A",
    "k", "K", "s", "\u017f", "\u00e9", ".", "^", "$", "\\d", "\\W", "\\pL", "\\p{Greek}",
    "\\PL", "\\p{^Lu}", "\\p{Foo}", "\\p", "\\x41", "\\x{1F600}", "\\x{}", "\\xZ", "\\Q",
    "\\E", "\\b", "\\z", "\\C", "\\1", "\\12", "\\0", "\\", "[:alpha:]", "[[:^digit:]]",
    "[[:foo:]]", "\\p{Letter}", "\\p{Assigned}", "\\pN", "(?U)", "(?s)", "(?m)", "(?-i)",
    "(?i-s:", "(?-)", "(?i-:", "??", "*?", "+?", "\\.", "\\_", "\\q", "ab", "abc", "ac",
    "[a-z]", "[z-a]", "[a-]", "[-a]", "[]a]", "\\n", "x*", "(a|b)", "a|ab|abc", "[Kk]",
    "[k\u212a]", "\u212a", "\\x{10FFFF}", "\\x{110000}",
]  # fmt: skip


def go_regexp_corpus(seed: int = 33, count: int = 4000) -> list[str]:
    """A seeded corpus of patterns made of :data:`GO_REGEXP_TOKENS` (the same every run)."""
    rng = random.Random(seed)
    return ["".join(rng.choices(GO_REGEXP_TOKENS, k=rng.randint(1, 12))) for _ in range(count)]


@st.composite
def float32_values(draw: st.DrawFn) -> Fraction:
    """Finite float32s, exactly: any bit pattern (every exponent as likely, subnormals
    included), whole numbers and decimals as a configuration writes them (``1.5``,
    ``2.00000001``, ``1234567``), each rounded to its float32."""
    kind = draw(st.sampled_from(["bits", "bits", "whole", "decimal"]))
    if kind == "bits":
        bits = draw(st.integers(min_value=0, max_value=0x7F7FFFFF))  # up to the largest
        magnitude = Fraction(struct.unpack("<f", struct.pack("<I", bits))[0])
        return -magnitude if draw(st.booleans()) else magnitude
    if kind == "whole":
        return round_float32(Fraction(draw(st.integers(min_value=-(10**9), max_value=10**9))))
    digits = draw(st.integers(min_value=1, max_value=10**9))
    return round_float32(Fraction(digits, 10 ** draw(st.integers(min_value=0, max_value=12))))


@st.composite
def go_float_texts(draw: st.DrawFn) -> str:
    """Texts for ``strconv.ParseFloat``: decimal and hexadecimal numbers with signs, points,
    exponents and underscores, the special words in any case, the float32 boundaries, and
    text that is almost a number."""
    kind = draw(st.sampled_from(["decimal", "decimal", "hex", "special", "boundary", "hostile"]))
    if kind == "special":
        word = draw(st.sampled_from(["inf", "infinity", "nan", "infin", "infinit", "na", "in"]))
        cased = "".join(c.upper() if draw(st.booleans()) else c for c in word)
        return draw(_signs) + cased
    if kind == "boundary":
        return draw(
            st.sampled_from(
                [
                    "3.4028234663852886e38",  # the largest float32
                    "3.4028235677973366e38",  # just under half an ulp above it
                    "3.4028235677973367e38",  # just over
                    "3.40282356779733661637539395458142568448e38",  # exactly half an ulp above
                    "0x1.fffffep127",
                    "0x1.ffffffp127",
                    "0x1p128",
                    "0x1p-149",
                    "0x1p-150",
                    "0x1.8p-150",
                    "1.401298464324817e-45",  # the least subnormal
                    "7.006492321624085e-46",  # half of it: ties to even, 0
                    "7.006492321624086e-46",
                    "1e-46",
                    "1e999999",
                    "1e-999999",
                    "16777217",  # 2^24 + 1: ties to even
                    "16777219",
                    "0." + "0" * 44 + "1401298464324817",
                    "1" * 800 + "e-762",
                    "1" * 801,
                ]
            )
        )
    if kind == "hostile":
        return draw(st.text("0123456789.eEpPxX+-_ inftyINFTYa", max_size=10))
    sign = draw(_signs)
    if kind == "hex":
        prefix = draw(st.sampled_from(["0x", "0X"]))
        mantissa = draw(_hex_digits)
        if draw(st.booleans()):
            mantissa += "." + draw(_hex_digits)
        exponent = ""
        if draw(st.integers(min_value=0, max_value=5)):
            exponent = (
                draw(st.sampled_from("pP"))
                + draw(_signs)
                + str(draw(st.integers(min_value=0, max_value=200)))
            )
        return sign + prefix + _with_underscores(draw, mantissa) + exponent
    whole = draw(_dec_digits)
    text = whole
    if draw(st.booleans()):
        text += "." + draw(st.text("0123456789", max_size=12))
    text = _with_underscores(draw, text)
    if draw(st.booleans()):
        exp = draw(
            st.integers(min_value=0, max_value=60) | st.integers(min_value=0, max_value=10**6)
        )
        text += draw(st.sampled_from("eE")) + draw(_signs) + _with_underscores(draw, str(exp))
    return sign + text


@st.composite
def go_integer_texts(draw: st.DrawFn) -> tuple[str, int, int]:
    """``(text, base, bits)`` for ``strconv.ParseUint``/``ParseInt``: the bases kata-mem
    reads (0, 2, 8, 10, 16), signs, prefixes, underscores, leading zeros and the edges of
    each size."""
    base = draw(st.sampled_from([0, 0, 2, 8, 10, 10, 16]))
    bits = draw(st.sampled_from([8, 16, 32, 64, 64]))
    kind = draw(st.sampled_from(["number", "number", "edge", "hostile"]))
    if kind == "hostile":
        return draw(st.text("0123456789abfoxABFOX+-_ ", max_size=12)), base, bits
    if kind == "edge":
        value = draw(
            st.sampled_from([1 << bits, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1])
        ) + draw(st.integers(min_value=-1, max_value=1))
        value = -value if draw(st.booleans()) else value
    else:
        value = draw(st.integers(min_value=-(1 << 70), max_value=1 << 70))
    radix = base or draw(st.sampled_from([2, 8, 10, 16]))
    digits = {2: "b", 8: "o", 10: "d", 16: "x"}[radix]
    text = format(abs(value), digits)
    if draw(st.booleans()):
        text = text.upper()
    prefix = ""
    if base == 0 and radix != 10:
        prefix = draw(
            st.sampled_from({2: ["0b", "0B"], 8: ["0o", "0O", "0"], 16: ["0x", "0X"]}[radix])
        )
    zeros = "0" * draw(st.integers(min_value=0, max_value=2) | st.just(30))
    body = _with_underscores(draw, prefix + zeros + text)
    sign = "-" if value < 0 else draw(st.sampled_from(["", "", "+"]))
    return sign + body, base, bits


#: Texts for ``strconv.ParseBool``: its spellings, their near misses, anything short.
go_bool_texts = st.sampled_from(
    ["1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"]
) | st.text("01tTrRuUeEfFaAlLsS yYnN", max_size=6)

# Go's regexp syntax (regexp/syntax, the RE2 syntax), and what RE2 and Go may take
# differently: \C, one-letter and named Unicode classes, case folding of classes, the
# ungreedy flag, possessive and nested repeats, the (?<name>) group, repeat counts.
_RE_ATOMS = [
    "a", "b", "k", "s", "_", "-", "0", "é", "\u03a3", "\u017f", "\u212a", " ",
    ".", "\\.", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\pL", "\\pN", "\\pZ", "\\PL",
    "\\p{Greek}", "\\p{Lu}", "\\p{^Lu}", "\\P{Ll}", "\\p{Any}", "\\p{Han}", "\\p{Kawi}",
    "\\p{Nag_Mundari}", "\\p{L&}", "\\p{Latin}",
    "[[:lower:]]", "[[:upper:]_]", "[[:^digit:]]", "[[:word:]]", "[a-z]", "[^a-z_]",
    "[\\d_]", "[a-]", "[]a]", "[^]]", "[\\pL\\d]", "[a-\\d]", "[z-a]", "[[:foo:]]",
    "\\x41", "\\x{263a}", "\\x{110000}", "\\101", "\\0", "\\a", "\\f", "\\v", "\\e",
    "\\Q.*\\E", "\\Qa\\C\\E", "\\Q", "\\E",
    "\\C", "\\z", "\\Z", "\\A", "^", "$", "\\b", "\\B", "\\1", "\\8", "\\<", "\\G", "\\K",
    "\\X", "\\R", "\\N", "\\h", "\\_", "\\-", "\\ ", "\\é",
    "[\\Q]\\E]", "\\x{", "\\x{61", "\\400", "\\08", "[[=a=]]", "[^\\x00-\\x{10FFFF}]",
]  # fmt: skip
_RE_REPEATS = [
    "*", "+", "?", "*?", "+?", "??", "{2}", "{0,}", "{1,3}", "{1,3}?", "{,3}", "{3,1}",
    "{1000}", "{1001}", "{0,1000}", "*+", "++", "?+", "**", "{2}{3}", "{2}*", "{",
]  # fmt: skip
_RE_GROUPS = [
    "({})", "(?:{})", "(?P<n>{})", "(?<n>{})", "(?P<1n>{})", "(?P<n>{})(?P<n>x)", "(?i){}",
    "(?i:{})", "(?U){}", "(?s){}", "(?m){}", "(?-i){}", "(?i-s:{})", "(?=x){}",
    "(?!{})", "(?<={})", "(?#c){}", "(?x){}", "({}", "{})", "(?:{})|", "|{}",
    "(?i-i:{})", "(?P<n!>{})", "(?--i){}", "(?i)[{}]",
]  # fmt: skip


@st.composite
def go_regexps(draw: st.DrawFn, depth: int = 3) -> str:
    """A pattern in Go's regexp syntax, or one of its near misses."""
    parts = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if depth > 0 and draw(st.integers(min_value=0, max_value=3)) == 0:
            inner = draw(go_regexps(depth - 1))
            atom = draw(st.sampled_from(_RE_GROUPS)).replace("{}", inner, 1)
        else:
            atom = draw(st.sampled_from(_RE_ATOMS))
        if draw(st.integers(min_value=0, max_value=2)) == 0:
            atom += draw(st.sampled_from(_RE_REPEATS))
        parts.append(atom)
    pattern = (
        "|".join(parts) if draw(st.integers(min_value=0, max_value=4)) == 0 else "".join(parts)
    )
    return pattern if draw(st.integers(min_value=0, max_value=9)) else draw(mutated_text(pattern))


@st.composite
def mutated_text(draw: st.DrawFn, text: str) -> str:
    """``text`` with a character dropped, doubled or replaced."""
    if not text:
        return text
    at = draw(st.integers(min_value=0, max_value=len(text) - 1))
    op = draw(st.sampled_from(["drop", "double", "replace"]))
    if op == "drop":
        return text[:at] + text[at + 1 :]
    if op == "double":
        return text[: at + 1] + text[at:]
    return text[:at] + draw(st.sampled_from("()[]{}\\|*+?^$.-:")) + text[at + 1 :]


#: Texts to match: annotation names as Kata has them, and text with the characters the
#: patterns above name (case folding: K, k and the Kelvin sign; s, S and the long s).
go_regexp_texts = st.sampled_from(
    ["default_memory", "default_vcpus", "enable_virtio_mem", "kernel_params", "", "memorymemory"]
) | st.text("abkKsS_-0 .\u212a\u017f\u03a3\u03c3\u03c2\u00e9\u6f22\n", max_size=8)


_QUANTITY_SUFFIXES = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "", "k", "M", "G", "T", "P", "E"]  # fmt: skip
#: Exponents whose int32 (apimachinery's suffixer keeps ``int32(parsed)``) is small, so
#: that Go answers at once: Go computes 10^exponent, and 1e2147483647 would take hours.
_WRAPPED_EXPONENTS = [2**32, 2**32 + 3, 2**33 - 9, -(2**32) + 1, 2**63 - 1, 2**63]


@st.composite
def quantity_texts(draw: st.DrawFn) -> str:
    """Texts for ``resource.ParseQuantity``: numbers with every suffix, exponents, signs,
    points and leading zeros, the int64 and nano boundaries, and near misses."""
    kind = draw(st.sampled_from(["number", "number", "number", "boundary", "hostile"]))
    if kind == "hostile":
        return draw(st.text("0123456789.+-eEiKMGTPnumk _", max_size=8))
    if kind == "boundary":
        return draw(
            st.sampled_from(
                [
                    "8Ei", "7.999999999999999999Ei", "9223372036854775807", "9223372036854775808",
                    "9223372036854775807m", "9223372036854775.807k", "-9223372036854775808",
                    "0.5n", "1e-9", "1e-10", "0.0000000001", "0.000000001", "1e18", "1e19",
                    "999999999999999999999999999999999999999999", "1e40", "1e41", "0e99",
                    "0.1Ki", "0.0000001Ki", "1n", "1.5n", "123456789.123456789123", "0Ei",
                    "00000000000000000000000000000000000000000000001", "1" + "0" * 5000,
                    "0." + "0" * 5000 + "1", "1.G", ".5", "5.", "-.5Gi", "+0", "-0", "0.",
                ]
            )
        )  # fmt: skip
    sign = draw(st.sampled_from(["", "", "", "+", "-"]))
    whole = draw(st.text("0123456789", max_size=22))
    text = whole
    if draw(st.booleans()):
        text += "." + draw(st.text("0123456789", max_size=12))
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        exponent = draw(
            st.integers(min_value=-60, max_value=60) | st.sampled_from(_WRAPPED_EXPONENTS)
        )
        suffix = (
            draw(st.sampled_from("eE"))
            + (draw(st.sampled_from(["", "+"])) if exponent >= 0 else "")
            + str(exponent)
        )
    else:
        suffix = draw(st.sampled_from(_QUANTITY_SUFFIXES))
    return sign + text + suffix


@st.composite
def quantity_json_values(draw: st.DrawFn) -> str:
    """The JSON text of a manifest's quantity: a string (surrounding white space, escapes),
    a number (exponents, points, signs), ``null``, or another JSON value."""
    kind = draw(st.sampled_from(["string", "string", "number", "other"]))
    if kind == "number":
        return draw(
            st.from_regex(
                r"-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,12})?([eE][-+]?[0-9]{1,2})?", fullmatch=True
            )
        )
    if kind == "other":
        return draw(
            st.sampled_from(["null", "true", "false", "[]", "{}", '"\\u0031Gi"', '"1\\u0047i"'])
        )
    space = st.sampled_from(["", "", " ", "\\t", "\\n", "\u00a0", "\u3000", "\\u0020"])
    return '"' + draw(space) + draw(quantity_texts()) + draw(space) + '"'


#: The resources of a Pod that kata-mem reads (amd64's hugepage sizes), and the values
#: a manifest gives them: whole sizes mostly, fractions, zeros, negatives, odd texts.
POD_RESOURCES = ["cpu", "memory", "hugepages-2Mi", "hugepages-1Gi"]


def _one_in(n: int) -> st.SearchStrategy[bool]:
    """True once in about ``n`` draws: a value in the middle of the range, which
    hypothesis does not favour as it favours the ends."""
    return st.integers(min_value=0, max_value=n - 1).map(lambda k: k == n // 2)


#: Values each resource usually has in a manifest, smallest first.
_USUAL = {
    "cpu": ["0", "100m", "250m", "500m", "1", "1500m", "2", "4"],
    "memory": ["0", "64Mi", "128Mi", "256Mi", "512Mi", "1000M", "1Gi", "1.5Gi", "2Gi", "4Gi"],
    "hugepages-2Mi": ["0", "2Mi", "4Mi", "64Mi", "128Mi", "1Gi"],
    "hugepages-1Gi": ["0", "1Gi", "2Gi"],
    "hugepages-1Mi": ["0", "1Mi", "64Mi"],  # s390x's, not amd64's
}
#: Values that are odd for any of them: fractions, exponents, negatives, not page sizes.
_ODD = st.sampled_from(["1", "0.5", "1k", "1e9", "3Mi", "100m", "-1", "-128Mi", "1.5n"]) | (
    quantity_texts().filter(lambda t: "e" not in t.lower() or len(t) < 12)
)


@st.composite
def _quantity_of(
    draw: st.DrawFn, name: str, at_most: Optional[str] = None, high: bool = False
) -> str:
    """A value of resource ``name``: usually one of its usual values (at most ``at_most``'s
    place among them, for a request under its limit), now and then an odd one."""
    if draw(_one_in(10)):
        return draw(_ODD)
    usual = _USUAL[name]
    top = usual.index(at_most) if at_most in usual else len(usual) - 1
    low = len(usual) // 2 if high and top == len(usual) - 1 else 0
    return usual[draw(st.integers(min_value=low, max_value=top))]


@st.composite
def _requirements(draw: st.DrawFn, high: bool = False) -> dict[str, Any]:
    """Limits and requests of cpu, memory and hugepages; a request usually at most its
    limit (a hugepage request usually equal to it), now and then above, or alone;
    ``high``: the upper half of the usual values (a pod's, above its containers')."""
    out: dict[str, Any] = {}
    names = st.sampled_from(POD_RESOURCES) | _one_in(40).map(
        lambda odd: "hugepages-1Mi" if odd else "memory"
    )
    limits = {
        name: draw(_quantity_of(name, high=high))
        for name in draw(st.lists(names, unique=True, max_size=3))
    }
    empty_limits = draw(st.booleans())  # "limits: {}"
    if limits or empty_limits:
        out["limits"] = limits
    if draw(st.integers(min_value=0, max_value=2)) == 0:
        return out
    requests = {}
    for name in draw(st.lists(names, unique=True, max_size=3)):
        limit = limits.get(name)
        if name.startswith("hugepages-") and (limit is None or not draw(_one_in(5))):
            if limit is not None:
                requests[name] = limit
            elif draw(_one_in(8)):
                requests[name] = draw(_quantity_of(name))  # without its limit
        elif limit is not None and draw(st.integers(min_value=0, max_value=4)):
            requests[name] = draw(_quantity_of(name, at_most=limit, high=high))
        else:
            requests[name] = draw(_quantity_of(name, high=high))
    out["requests"] = requests
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


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A Pod's spec: app containers, init containers and sidecars (``restartPolicy:
    Always``), each with or without requests and limits of cpu, memory and hugepages, and
    pod-level resources (KEP-2837) or none; names unique but now and then."""

    def container(i: int, init: bool) -> dict[str, Any]:
        c: dict[str, Any] = {"name": f"c{i}", "image": "registry.example/app:1"}
        if draw(st.integers(min_value=0, max_value=4)):
            c["resources"] = draw(_requirements())
        if init and draw(st.booleans()):
            c["restartPolicy"] = draw(
                st.sampled_from(["Always", "Always", "Always", "Never", "OnFailure", "Sometimes"])
            )
        return c

    inits = [container(i, True) for i in range(draw(st.integers(min_value=0, max_value=2)))]
    apps = [
        container(i + len(inits), False) for i in range(draw(st.integers(min_value=1, max_value=3)))
    ]
    if draw(_one_in(30)):
        apps[-1]["name"] = (inits + apps)[0]["name"]  # a name given twice
    spec: dict[str, Any] = {"containers": apps}
    if inits:
        spec["initContainers"] = inits
    if draw(st.booleans()):
        spec["resources"] = draw(_requirements(high=True))
    return spec


def _yaml_scalar(value: str) -> str:
    """``value`` as a YAML plain scalar where it can be one (go-yaml then types it: 1e3
    and 0.5 are numbers, 012 octal, 1_000 an int), else double-quoted."""
    plain = value not in ("", "-") and all(c.isalnum() or c in "+-._" for c in value)
    return value if plain else json.dumps(value)


def _yaml_lines(value: Any, indent: int, plain: bool) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                lines.append(f"{pad}{key}:" + (" {}" if not item else ""))
                lines += _yaml_lines(item, indent + 2, plain)
            else:
                text = _yaml_scalar(item) if plain else json.dumps(item)
                lines.append(f"{pad}{key}: {text}")
    else:
        for item in value:
            inner = _yaml_lines(item, indent + 2, plain)
            lines.append(f"{pad}- {inner[0].lstrip()}")
            lines += inner[1:]
    return lines


@st.composite
def pod_manifests(draw: st.DrawFn) -> str:
    """A Pod manifest with a generated spec: JSON, or YAML whose quantities are quoted or,
    where they can be, plain scalars that go-yaml types by itself."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": draw(pod_specs())}
    form = draw(st.sampled_from(["json", "yaml", "yaml-plain"]))
    if form == "json":
        text = json.dumps(pod)
        if draw(_one_in(4)):  # quantities as JSON numbers where they can be: 0.5, 1e9, -1
            text = re.sub(r'"(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"', r"\1", text)
        return text
    return "\n".join(_yaml_lines(pod, 0, form == "yaml-plain")) + "\n"
