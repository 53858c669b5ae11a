"""The CLI, not only the shim, over generated and mutated Pod, OCI and TOML files.

Every run ends with a documented exit code (0; 3 for the configuration; 4 for a Pod or
OCI file) and, when it fails, exactly one ``kata-mem: error:`` line: never "internal
error", never a traceback. Deep nesting, files around their size caps and special files
(FIFOs, devices, sockets, directories) included. Most runs are in-process (``run_cli``);
a few real processes check the same with a timeout. About a minute on a slow 2-core
machine with the full hypothesis profile (100 examples per test).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kata_mem.edges.files import CONFIG_CAP, MANIFEST_CAP
from tests.strategies import mutated
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS
from tests.support.paths import KATA_CONFIGS, PODS

# A read that blocks (a FIFO, /dev/urandom) fails the test here instead of hanging CI.
pytestmark = pytest.mark.timeout(300)

FUZZ = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
Run = Callable[..., CliResult]
UPSTREAM_QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")
QEMU_TOML = (KATA_CONFIGS / "configuration-qemu.toml").read_bytes()
BOOM = (PODS / "memory-boom.yaml").read_bytes()
OCI_SPEC = json.dumps(
    {
        "ociVersion": "1.1.0",
        "annotations": {"io.kubernetes.cri.container-name": "app"},
        "linux": {
            "resources": {
                "memory": {"limit": 536870912},
                "cpu": {"quota": 50000, "period": 100000, "cpus": "0-3"},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 2097152}],
            }
        },
    }
).encode()


def check(r: CliResult, *allowed: int) -> None:
    """A documented exit code, and one error line when it is not 0."""
    assert r.code in (0, *allowed), (r.code, r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    if r.code:
        errors = [line for line in r.err.splitlines() if line.startswith("kata-mem: error: ")]
        assert len(errors) == 1, r.err


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("cli-fuzz")


def _write(root: Path, name: str, data: bytes) -> Path:
    path = root / name
    path.write_bytes(data)
    return path


def preview_pod(run_cli: Run, pod: Path) -> CliResult:
    return run_cli("preview", "--config", UPSTREAM_QEMU, "--pod", str(pod), *HOST_ARGS)


# --- Generated manifests: numbers and oddities where Kubernetes reads quantities ---------

# Scalars whose meaning differs between YAML 1.1, go-yaml v2 and JSON, and plain garbage.
TOKENS = [
    "0.5", "2.5", "1.5", "12:30", "1:30.5", "0x10", "0o10", "010", "08", "1_000", "0b101",
    "-0b101", "+.5", "._5", ".5_0", ".inf", "-.inf", ".nan", "1e3", "1e400", "1e-400",
    "18446744073709551616", "yes", "no", "on", "~", "null", "", "2001-12-14", "1Gi",
    "500m", "-1", "1K", '"1Gi"', '" 2 "', '"\\t2"', "!!float 1", "!!int 1.5",
    "!!binary MUdp", "!!binary ***", "!x 5", "[1]", "{a: 1}", "8Ei", "1" * 5000, "&a 1",
    "*a", "'1Mi'", "1e999999999", "0.000000000000000000001", "|\n          1Gi",
]  # fmt: skip
yaml_scalars = st.one_of(
    st.sampled_from(TOKENS),
    st.text(alphabet="0123456789.eE+-_:xobKMGTPimnuk ~!\"'", max_size=10),
)
json_numbers = st.from_regex(
    r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][+-]?[0-9]{1,4})?", fullmatch=True
)
json_scalars = st.one_of(
    json_numbers,
    st.sampled_from(["null", "true", "NaN", "Infinity", '"\\u0031Gi"', '" 1Gi "', "[1]", "{}"]),
    st.text(max_size=8).map(json.dumps),
)
limit_keys = st.sampled_from(["memory", "cpu", "hugepages-2Mi", "hugepages-1Gi", "ephemeral"])


@st.composite
def yaml_pods(draw: st.DrawFn) -> str:
    lines = ["apiVersion: v1", "kind: Pod", "metadata: {name: fuzz}", "spec:"]
    for field in draw(st.lists(st.sampled_from(["containers", "initContainers"]), min_size=1)):
        lines.append(f"  {field}:")
        for i in range(draw(st.integers(min_value=0, max_value=3))):
            lines += [f"  - name: c{i}", "    resources:", "      limits:"]
            limits = draw(st.dictionaries(limit_keys, yaml_scalars, max_size=3))
            lines += [f"        {k}: {v}" for k, v in limits.items()]
            if draw(st.booleans()):
                lines.append(f"    restartPolicy: {draw(st.sampled_from(['Always', 'Never']))}")
    return "\n".join(lines) + "\n"


@st.composite
def json_pods(draw: st.DrawFn) -> str:
    containers = []
    for i in range(draw(st.integers(min_value=1, max_value=3))):
        limits = draw(st.dictionaries(limit_keys, json_scalars, max_size=3))
        body = ", ".join(f'"{k}": {v}' for k, v in limits.items())
        containers.append(f'{{"name": "c{i}", "resources": {{"limits": {{{body}}}}}}}')
    return '{"kind": "Pod", "spec": {"containers": [' + ", ".join(containers) + "]}}"


@FUZZ
@given(yaml_pods())
def test_generated_yaml_pods(run_cli: Run, files: Path, text: str) -> None:
    check(preview_pod(run_cli, _write(files, "pod.yaml", text.encode())), 4)


@FUZZ
@given(json_pods())
def test_generated_json_pods(run_cli: Run, files: Path, text: str) -> None:
    check(preview_pod(run_cli, _write(files, "pod.json", text.encode())), 4)


@FUZZ
@given(st.one_of(mutated(BOOM), json_pods().map(str.encode).flatmap(mutated)))
def test_mutated_pods(run_cli: Run, files: Path, data: bytes) -> None:
    check(preview_pod(run_cli, _write(files, "pod", data)), 4)


@FUZZ
@given(mutated(OCI_SPEC))
def test_mutated_oci_specs(run_cli: Run, files: Path, data: bytes) -> None:
    oci = _write(files, "config.json", data)
    check(run_cli("preview", "--config", UPSTREAM_QEMU, "--oci", str(oci), *HOST_ARGS), 4)


@FUZZ
@given(st.one_of(mutated(QEMU_TOML), st.binary(max_size=64)))
def test_mutated_configurations(run_cli: Run, files: Path, data: bytes) -> None:
    cfg = _write(files, "configuration.toml", data)
    check(run_cli("preview", "--config", str(cfg), *HOST_ARGS), 3)


# --- Deep nesting ------------------------------------------------------------------------

NESTING: dict[str, tuple[str, str, str, Callable[[int], str]]] = {
    # kind: (file, option, text around the nesting, the nesting for a depth)
    "pod-yaml": ("pod.yaml", "--pod", "kind: Pod\nspec:\n  containers: {}\n", lambda n: "[" * n),
    "pod-yaml-map": ("pod.yaml", "--pod", "kind: Pod\nspec: {}\n", lambda n: "{a: " * n),
    "pod-json": ("pod.json", "--pod", '{{"kind": "Pod", "spec": {{"containers": {}}}}}', lambda n: "[" * n + "]" * n),
    "oci": ("config.json", "--oci", '{{"linux": {{"resources": {}}}}}', lambda n: '{"a": ' * n + "1" + "}" * n),
    "toml-array": ("c.toml", "--config", "[hypervisor.qemu]\nx = {}\n", lambda n: "[" * n + "]" * n),
    "toml-table": ("c.toml", "--config", "[hypervisor.qemu]\nx = {}\n", lambda n: "{a = " * n + "1" + "}" * n),
}  # fmt: skip


@FUZZ
@given(st.sampled_from(sorted(NESTING)), st.integers(min_value=1, max_value=120_000))
def test_deep_nesting(run_cli: Run, files: Path, kind: str, depth: int) -> None:
    name, option, frame, nest = NESTING[kind]
    path = _write(files, name, frame.format(nest(depth)).encode())
    config = () if option == "--config" else ("--config", UPSTREAM_QEMU)
    check(
        run_cli("preview", *config, option, str(path), *HOST_ARGS), 3 if option == "--config" else 4
    )


# --- Sizes around the caps, and special files -----------------------------------------------

# A small valid file of each kind, and what it can be padded with up to a size.
SMALL = {
    "--pod": (
        b"kind: Pod\nspec: {containers: [{name: a, resources: {limits: {memory: 1Gi}}}]}\n#",
        b"#",
    ),
    "--oci": (OCI_SPEC, b" "),
    "--config": (QEMU_TOML + b"\n#", b"#"),
}


@pytest.mark.parametrize("option", sorted(SMALL))
@pytest.mark.parametrize("extra", [-1, 0, 1, 1 << 20])
def test_sizes_around_the_caps(run_cli: Run, tmp_path: Path, option: str, extra: int) -> None:
    cap = CONFIG_CAP if option == "--config" else MANIFEST_CAP
    head, pad = SMALL[option]
    path = _write(tmp_path, "f", head + pad * (cap + extra - len(head)))
    config = () if option == "--config" else ("--config", UPSTREAM_QEMU)
    r = run_cli("preview", *config, option, str(path), *HOST_ARGS)
    check(r, 3 if option == "--config" else 4)
    assert (r.code == 0) == (extra <= 0), r.err
    if extra > 0:
        assert "larger than the" in r.err


def _special(kind: str, root: Path) -> Path:
    path = root / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "missing":
        pass
    elif kind == "dangling-symlink":
        path.symlink_to(root / "nowhere")
    else:  # a device, through a symlink named like a real file
        path.symlink_to({"zero": "/dev/zero", "urandom": "/dev/urandom", "null": "/dev/null"}[kind])
    return path


SPECIAL = ["fifo", "directory", "missing", "dangling-symlink", "zero", "urandom", "null", "socket"]


@pytest.mark.parametrize("kind", SPECIAL)
@pytest.mark.parametrize("option", ["--config", "--pod", "--oci", "config.d"])
def test_special_files(run_cli: Run, tmp_path: Path, option: str, kind: str) -> None:
    sock = None
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(tmp_path / "socket"))
        path = tmp_path / "socket"
    else:
        path = _special(kind, tmp_path)
    try:
        if option == "config.d":
            cfg = _write(tmp_path, "configuration.toml", QEMU_TOML)
            (tmp_path / "config.d").mkdir()
            if kind != "missing":
                os.rename(path, tmp_path / "config.d" / "50-x.toml")
            r = run_cli("preview", "--config", str(cfg), *HOST_ARGS)
            # A directory is refused as Kata refuses it (it was once skipped).
            expected = 0 if kind == "missing" else 3
        else:
            config = () if option == "--config" else ("--config", UPSTREAM_QEMU)
            r = run_cli("preview", *config, option, str(path), *HOST_ARGS)
            expected = 3 if option == "--config" else 4
        check(r, expected)
        assert r.code == expected, r.err
    finally:
        if sock is not None:
            sock.close()


# --- A few real processes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "code"),
    [("fifo-pod", 4), ("urandom-oci", 4), ("deep-pod-json", 4), ("zero-dropin", 3)],
)
def test_real_processes(tmp_path: Path, case: str, code: int) -> None:
    args: list[Any] = ["preview", *HOST_ARGS]
    if case == "fifo-pod":
        args += ["--config", UPSTREAM_QEMU, "--pod", str(_special("fifo", tmp_path))]
    elif case == "urandom-oci":
        args += ["--config", UPSTREAM_QEMU, "--oci", "/dev/urandom"]
    elif case == "deep-pod-json":
        pod = _write(tmp_path, "pod.json", b'{"kind": "Pod", "spec": ' + b"[" * 100_000)
        args += ["--config", UPSTREAM_QEMU, "--pod", str(pod)]
    else:
        cfg = _write(tmp_path, "configuration.toml", QEMU_TOML)
        (tmp_path / "config.d").mkdir()
        (tmp_path / "config.d" / "10-zero.toml").symlink_to("/dev/zero")
        args += ["--config", str(cfg)]
    r = kata_mem_process(*args, timeout=60)
    check(CliResult(r.returncode, r.stdout, r.stderr), code)
    assert r.returncode == code
