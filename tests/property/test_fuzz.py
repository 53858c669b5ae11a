"""Fuzzing the input edges with hypothesis: generated and mutated TOML, Pod manifests,
OCI specs and shim requests. Every input either parses or is rejected with a
documented kata-mem error; nothing else escapes. Ten times the examples of the hypothesis
profile per test (1000 in CI's), or KATA_MEM_FUZZ_EXAMPLES; scripts/fuzz.sh runs many more.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kata_mem.core.endpoint import LIBVIRT_URIS
from kata_mem.core.errors import ConfigError, InputError, KataMemError
from kata_mem.core.request import SandboxRequest
from kata_mem.edges.config import load_config
from kata_mem.edges.pod import pod_containers, read_pod
from kata_mem.edges.sources import read_oci
from kata_mem.interfaces.shim import run_shim
from tests.strategies import examples, mutated, valid_requests
from tests.support.paths import KATA_CONFIGS, PODS, REPO

# Ten times the profile's (1000 in CI); scripts/fuzz.sh asks for many more.
EXAMPLES = int(os.environ.get("KATA_MEM_FUZZ_EXAMPLES") or examples(10))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
REQUEST_SCHEMA = json.loads((REPO / "kata_mem" / "schemas" / "shim-request.v1.json").read_text())
RESPONSE_SCHEMA = json.loads((REPO / "kata_mem" / "schemas" / "shim-response.v1.json").read_text())
# Built once: jsonschema.validate checks the schema itself on every call, which was most of
# these tests' time.
REQUEST_VALIDATOR = jsonschema.Draft202012Validator(REQUEST_SCHEMA)
RESPONSE_VALIDATOR = jsonschema.Draft202012Validator(RESPONSE_SCHEMA)
QEMU_TOML = (KATA_CONFIGS / "configuration-qemu.toml").read_bytes()
BOOM = (PODS / "memory-boom.yaml").read_bytes()

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(str(v))


SIZING_KEYS = [
    "default_memory",
    "default_maxmemory",
    "memory_slots",
    "memory_offset",
    "enable_virtio_mem",
    "enable_hugepages",
    "default_vcpus",
    "default_maxvcpus",
    "other",
]
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=8),
)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(SIZING_KEYS),
        st.one_of(toml_scalars, st.lists(toml_scalars, max_size=3)),
        max_size=9,
    ),
    st.dictionaries(
        st.sampled_from(
            ["headroom_percent", "dimm_block_mib", "state_dir", "allow_shrink", "bogus"]
        ),
        toml_scalars,
        max_size=3,
    ),
)
def test_generated_toml(
    tmp_path_factory: Any, keys: dict[str, Any], settings_keys: dict[str, Any]
) -> None:
    path = Path(tmp_path_factory.mktemp("toml")) / "c.toml"
    lines = ["[hypervisor.qemu]", *(f"{k} = {toml_value(v)}" for k, v in keys.items())]
    lines += ["[kata_mem]", *(f"{k} = {toml_value(v)}" for k, v in settings_keys.items())]
    path.write_text("\n".join(lines) + "\n")
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
        return
    assert cfg.default_memory >= 256 << 20 and cfg.memory_slots >= 1


@FUZZ
@given(mutated(QEMU_TOML))
def test_mutated_upstream_toml(tmp_path_factory: Any, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("toml")) / "c.toml"
    path.write_bytes(data)
    with contextlib.suppress(ConfigError):
        load_config(path)


@FUZZ
@given(json_values)
def test_generated_pod_documents(doc: Any) -> None:
    pod = {"kind": "Pod", "spec": doc}
    with contextlib.suppress(InputError):
        pod_containers(pod, "fuzz", "amd64")


@FUZZ
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["name", "resources", "restartPolicy"]), json_values, max_size=3
        ),
        min_size=1,
        max_size=3,
    )
)
def test_generated_containers(containers: list[dict[str, Any]]) -> None:
    with contextlib.suppress(InputError):
        pod_containers({"kind": "Pod", "spec": {"containers": containers}}, "fuzz", "amd64")


@FUZZ
@given(mutated(BOOM))
def test_mutated_pod_manifest(tmp_path_factory: Any, data: bytes) -> None:
    path = Path(tmp_path_factory.mktemp("pod")) / "pod.yaml"
    path.write_bytes(data)
    with contextlib.suppress(InputError):
        read_pod(path, "amd64")


@FUZZ
@given(json_values)
def test_generated_oci_specs(doc: Any) -> None:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        fh.write(json.dumps({"linux": {"resources": doc}} if isinstance(doc, dict) else doc))
        fh.flush()
        with contextlib.suppress(InputError):
            read_oci(Path(fh.name), "amd64")


container_fields = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=6), st.integers()),
        "state": st.sampled_from(["running", "created", "stopped", "paused", 3]),
        "role": st.sampled_from(["app", "init", "sidecar", "other"]),
        "memory_limit_bytes": st.one_of(
            st.none(),
            st.integers(min_value=-(2**64), max_value=2**64),
            st.text(max_size=4),
            st.floats(),
        ),
        "hugepages_limit_bytes": st.one_of(st.none(), st.integers(min_value=-5, max_value=2**64)),
        "cpu_quota": st.one_of(st.none(), st.integers(min_value=-(2**64), max_value=2**64)),
        "cpu_period": st.one_of(st.none(), st.integers(min_value=-5, max_value=2**64)),
        "extra": st.integers(),
    },
)
noisy_resources = st.fixed_dictionaries(
    {},
    optional={
        "memory_limit_bytes": st.one_of(
            st.none(), st.integers(min_value=-(2**64), max_value=2**64), st.text(max_size=3)
        ),
        "cpu_quota": st.one_of(st.none(), st.integers(min_value=-(2**64), max_value=2**64)),
        "cpu_period": st.one_of(st.none(), st.integers(min_value=-5, max_value=2**64)),
        "extra": st.integers(),
    },
)
noisy_requests = st.fixed_dictionaries(
    {
        "schema": st.sampled_from(
            ["kata-mem/shim-request/v1", "kata-mem/shim-request/v1", "kata-mem/shim-request/v2", 1]
        )
    },
    optional={
        "sandbox_id": st.one_of(
            st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True),
            st.text(max_size=6),
            st.integers(),
        ),
        "event": st.sampled_from(
            ["create", "update", "update-sandbox", "delete", "reconcile", "resize", None]
        ),
        "containers": st.one_of(st.lists(container_fields, max_size=3), st.integers()),
        "backend": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"type": st.sampled_from(["qmp", "libvirt", "xen"])},
                optional={
                    "socket": st.text(max_size=4),
                    "uri": st.one_of(
                        st.text(max_size=4),
                        st.sampled_from([*LIBVIRT_URIS, "qemu+ext:///system?command=/bin/true"]),
                    ),
                    "domain": st.text(max_size=4),
                },
            ),
        ),
        "apply": st.one_of(st.booleans(), st.integers(min_value=0, max_value=1)),
        "allow_shrink": st.booleans(),
        "host": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "memory_bytes": st.one_of(st.none(), st.integers(min_value=0, max_value=2**64)),
                    "cpus": st.one_of(st.none(), st.integers(min_value=-1, max_value=4)),
                    "arch": st.sampled_from([None, "amd64", ""]),
                },
            ),
        ),
        "annotations": st.one_of(
            st.none(),
            st.dictionaries(
                st.sampled_from(["io.kubernetes.cri.sandbox-memory", "x"]),
                st.one_of(st.from_regex(r"[+-]?[0-9]{1,20}", fullmatch=True), st.text(max_size=4)),
                max_size=2,
            ),
        ),
        "sandbox_resources": st.one_of(st.none(), st.integers(), noisy_resources),
        "overhead": st.one_of(st.none(), st.integers(), noisy_resources),
        "unknown": st.integers(),
    },
)
# Valid requests, one field of a valid request replaced by noise, and pure noise.
shim_requests = st.one_of(
    valid_requests,
    st.tuples(valid_requests, noisy_requests).map(
        lambda p: {**p[0], **dict(list(p[1].items())[1:2])}
    ),
    noisy_requests,
)


@FUZZ
@given(valid_requests)
def test_valid_requests_are_accepted(doc: dict[str, Any]) -> None:
    REQUEST_VALIDATOR.validate(doc)
    SandboxRequest.from_json(json.dumps(doc).encode())


@FUZZ
@given(shim_requests)
def test_shim_reader_agrees_with_the_json_schema(doc: dict[str, Any]) -> None:
    """The hand-written reader and the shipped JSON Schema accept exactly the same requests."""
    raw = json.dumps(doc).encode()
    try:
        SandboxRequest.from_json(raw)
        accepted = True
    except InputError:
        accepted = False
    # JSON Schema cannot say "each container id once" (the schema's description does).
    items = doc.get("containers")
    ids = [c.get("id") for c in items if isinstance(c, dict)] if isinstance(items, list) else []
    once = len({json.dumps(i) for i in ids}) == len(ids)
    schema_ok = REQUEST_VALIDATOR.is_valid(doc) and once
    assert accepted == schema_ok, doc


@pytest.fixture(scope="module")
def isolated_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The upstream QEMU configuration with its state under a temporary directory, so that
    requests that name a (missing) VM never touch the machine's /run/kata-mem."""
    root = tmp_path_factory.mktemp("shim-fuzz")
    path = root / "configuration.toml"
    extra = f'\n[kata_mem]\nstate_dir = "{root / "state"}"\n'
    path.write_bytes((KATA_CONFIGS / "configuration-qemu.toml").read_bytes() + extra.encode())
    return path


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=200),
        json_values.map(lambda v: json.dumps(v).encode()),
        shim_requests.map(lambda d: json.dumps(d).encode()),
    )
)
def test_shim_never_escapes(isolated_config: Path, raw: bytes) -> None:
    out = io.StringIO()
    try:
        code = run_shim(io.BytesIO(raw), out, {"KATA_CONF_FILE": str(isolated_config)})
    except KataMemError as exc:  # pragma: no cover - would be a bug
        raise AssertionError(f"escaped: {exc}") from exc
    doc = json.loads(out.getvalue())
    RESPONSE_VALIDATOR.validate(doc)
    assert code in (0, 3, 4, 6) and (code == 0) == ("error" not in doc)


def test_yaml_float_means_what_kubernetes_reads() -> None:
    # An unquoted 1.5 is the float 1.5 to go-yaml, written "1.5" to JSON: 1.5 bytes, which
    # Quantity.Value() rounds up to 2 (kata-mem once refused it).
    doc = yaml.safe_load(
        "kind: Pod\nspec: {containers: [{name: a, resources: {limits: {memory: 1.5}}}]}"
    )
    (container,) = pod_containers(doc, "x", "amd64")
    assert container.memory_limit == 2
