"""The Kubernetes manifests in deploy/kubernetes (issue 18 §3): valid for Kubernetes 1.35
in kubernetes-validate's strict mode (unknown fields refused), consistent with each other
and with kata-mem (the drop-in loads with the real loader, the DaemonSet serves the
socket its probes ask, the RuntimeClass is what ``kata-mem runtimeclass`` computes for the
configuration and drop-in they ship), and the Containerfile installs this version's wheel."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import ValidationError, validate

from kata_mem.edges.config import load_config
from tests.support.cli import kata_mem_process
from tests.support.paths import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

DEPLOY = REPO / "deploy" / "kubernetes"
KUBERNETES = "1.35"
#: Where the manifests say kata-deploy installs Kata's QEMU configuration.
NODE_CONFIG = "/opt/kata/share/defaults/kata-containers/configuration-qemu.toml"
#: What deploy/kubernetes/runtimeclass.yaml was computed for.
RUNTIMECLASS_ARGS = ("--max-pod-memory", "8Gi")


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def manifest(kind: str) -> dict[str, Any]:
    (found,) = [
        d for p in sorted(DEPLOY.glob("*.yaml")) for d in documents(p.name) if d["kind"] == kind
    ]
    return found


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_is_valid_for_kubernetes_1_35_strictly(path: Path) -> None:
    docs = documents(path.name)
    assert docs
    for doc in docs:  # an unknown version would be refused (VersionNotSupportedError)
        validate(doc, KUBERNETES, strict=True)


def test_strict_validation_refuses_an_unknown_field() -> None:
    """The check above can fail: a misspelt field in the DaemonSet is refused."""
    daemonset = manifest("DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(ValidationError):
        validate(daemonset, KUBERNETES, strict=True)


def pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = manifest("DaemonSet")["spec"]["template"]["spec"]
    return spec


def serve_container() -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec()["containers"]
    (found,) = [c for c in containers if c["name"] == "kata-mem"]
    return found


def option(container: dict[str, Any], name: str) -> str:
    args: list[str] = container["args"]
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    return value


def test_every_mount_has_its_volume_and_every_host_path_its_reason() -> None:
    spec = pod_spec()
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounted = {
        m["name"] for c in spec["containers"] + spec["initContainers"] for m in c["volumeMounts"]
    }
    assert mounted == set(volumes)
    text = (DEPLOY / "daemonset.yaml").read_text()
    for c in spec["containers"]:
        for m in c["volumeMounts"]:
            # Each mount of the service is preceded by the comment that justifies it.
            before = text[: text.index(f"- name: {m['name']}\n              mountPath")]
            assert before.rstrip().splitlines()[-1].lstrip().startswith("#"), m["name"]


def test_the_service_runs_with_no_capability_and_no_writable_host_path_but_its_own() -> None:
    spec = pod_spec()
    assert spec["hostPID"] is True and "hostNetwork" not in spec
    for c in spec["containers"] + spec["initContainers"]:
        sc = c["securityContext"]
        assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
        assert "add" not in sc["capabilities"] and "privileged" not in sc
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    writable = {
        m["mountPath"]
        for c in spec["containers"]
        for m in c["volumeMounts"]
        if not m.get("readOnly")
    }
    assert writable == {"/run/kata-mem"}


def test_the_probes_ask_the_socket_serve_listens_on() -> None:
    c = serve_container()
    sock = option(c, "socket")
    for probe in ("livenessProbe", "readinessProbe"):
        script = c[probe]["exec"]["command"][-1]
        assert f'connect("{sock}")' in script


def test_the_service_reads_the_configuration_the_init_container_completes() -> None:
    spec = pod_spec()
    config = option(serve_container(), "config")
    assert config == NODE_CONFIG
    (init,) = spec["initContainers"]
    target = init["command"][-1]
    assert target == str(Path(config).parent / "config.d" / "50-kata-mem.toml")
    assert any(
        m["mountPath"] == str(Path(config).parent) and m["readOnly"]
        for m in serve_container()["volumeMounts"]
    )


def node_config(tmp_path: Path) -> Path:
    """The bundled Kata QEMU configuration with the ConfigMap's drop-in beside it, as the
    init container leaves a node."""
    config = tmp_path / "configuration-qemu.toml"
    shutil.copy(REPO / "configs" / "configuration-qemu.toml", config)
    (tmp_path / "config.d").mkdir()
    drop_in = manifest("ConfigMap")["data"]["50-kata-mem.toml"]
    (tmp_path / "config.d" / "50-kata-mem.toml").write_text(drop_in)
    return config


def test_the_drop_in_is_a_kata_mem_table_the_loader_takes(tmp_path: Path) -> None:
    drop_in = manifest("ConfigMap")["data"]["50-kata-mem.toml"]
    assert set(tomllib.loads(drop_in)) == {"kata_mem"}  # nothing of Kata's: config.d is shared
    cfg = load_config(node_config(tmp_path))
    assert str(tmp_path / "config.d" / "50-kata-mem.toml") in cfg.files
    assert cfg.settings.state_dir == option(serve_container(), "socket").rsplit("/", 1)[0]


def test_the_runtimeclass_is_what_kata_mem_computes_for_them(tmp_path: Path) -> None:
    config = node_config(tmp_path)
    r = kata_mem_process("runtimeclass", "--config", str(config), *RUNTIMECLASS_ARGS)
    assert r.returncode == 0, r.stderr
    computed = r.stdout.replace(str(config), NODE_CONFIG)
    assert (DEPLOY / "runtimeclass.yaml").read_text() == computed
    assert manifest("RuntimeClass")["handler"] == "kata-qemu"


def test_the_containerfile_installs_this_versions_wheel() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wheel = f"kata_mem-{project['version']}-py3-none-any.whl"
    text = (DEPLOY / "Containerfile").read_text()
    assert f"COPY dist/{wheel} /tmp/" in text and f"pip install --no-cache-dir /tmp/{wheel}" in text
    python = re.search(r"^FROM \S+/python:(\d+)\.(\d+)-", text, re.M)
    assert python is not None
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", project["requires-python"])
    assert minimum is not None
    assert tuple(map(int, python.groups())) >= tuple(map(int, minimum.groups()))
    image = {c["image"] for c in pod_spec()["containers"] + pod_spec()["initContainers"]}
    assert image == {f"registry.example/kata-mem:{project['version']}"}
