"""The Kubernetes manifests in deploy/kubernetes: valid for Kubernetes 1.35
in kubernetes-validate's strict mode (unknown fields refused), consistent with each other
and with kata-mem (the drop-in loads with the real loader, the DaemonSet serves the
socket its probes ask, the RuntimeClass is what ``kata-mem runtimeclass`` computes for the
configuration and drop-in they ship), and the Containerfile installs this version's wheel."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
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


def kustomization() -> dict[str, Any]:
    (found,) = documents("kustomization.yaml")
    return found


def image_setting() -> dict[str, Any]:
    """The one ``images`` entry: the Component both kustomizations take in."""
    (found,) = documents("image/kustomization.yaml")
    assert found["kind"] == "Component"
    (image,) = found["images"]
    return dict(image)


#: The manifests, as the kustomization lists them (``kubectl apply -k``).
MANIFESTS = [DEPLOY / name for name in kustomization()["resources"]]


def manifest(kind: str) -> dict[str, Any]:
    (found,) = [d for p in MANIFESTS for d in documents(p.name) if d["kind"] == kind]
    return found


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
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


def test_the_nri_plugin_asks_serve_on_its_socket_for_configurations_serve_sees() -> None:
    """The plugin beside serve: it connects to the socket serve listens on and to the NRI
    socket of its mount, and every handler's configuration is one serve has mounted (serve
    reads it, by the host's path); its flags are the ones kata-mem-nri takes."""
    (plugin,) = [c for c in pod_spec()["containers"] if c["name"] == "kata-mem-nri"]
    flags = dict(a.removeprefix("-").split("=", 1) for a in plugin["command"][1:])
    assert plugin["command"][0] == "kata-mem-nri"
    assert flags["socket"] == option(serve_container(), "socket")
    mounts = {m["mountPath"] for m in plugin["volumeMounts"]}
    assert str(Path(flags["nri-socket"]).parent) in mounts
    served = {m["mountPath"] for m in serve_container()["volumeMounts"]}
    handler, config = flags["handler"].split("=", 1)
    assert handler and any(config.startswith(f"{m}/") for m in served), config
    source = (REPO / "go" / "cmd" / "kata-mem-nri" / "main.go").read_text()
    for flag in flags:
        assert f'"{flag}"' in source, flag


def test_the_probes_ask_the_socket_serve_listens_on() -> None:
    c = serve_container()
    sock = option(c, "socket")
    for probe in ("livenessProbe", "readinessProbe"):
        script = c[probe]["exec"]["command"][-1]
        assert f'connect("{sock}")' in script


#: The Kata directory the manifests mount (kata-deploy's).
KATA_DIR = str(Path(NODE_CONFIG).parent)


def install_script() -> str:
    """The install init container's script."""
    (init,) = pod_spec()["initContainers"]
    assert init["command"][:2] == ["sh", "-c"]
    script: str = init["command"][-1]
    assert f"\nkata={KATA_DIR}\n" in script
    return script


def run_script(script: str, kata: Path, **paths: Path) -> subprocess.CompletedProcess[str]:
    """``script`` on a node whose Kata directory is ``kata`` (and whose other paths, by
    the variable that holds them, are ``paths``)."""
    script = script.replace(f"kata={KATA_DIR}", f"kata={shlex.quote(str(kata))}")
    for name, path in paths.items():
        said = f"{name}={shlex.quote(str(path))}"
        script = "\n".join(
            line[: len(line) - len(line.lstrip())] + said
            if line.lstrip().startswith(f"{name}=")
            else line
            for line in script.splitlines()
        )
    return subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=30, check=False
    )


def kata_deploy_node(kata: Path, links: bool = True) -> None:
    """Kata's directory as kata-deploy leaves it (install.rs setup_runtime_directory), for
    the Go runtime and for runtime-rs: from 3.27 a copy of each shim's configuration in
    runtimes/SHIM/, beside its own config.d, which containerd's ConfigPath names; from 3.29
    (``links``) the top-level configuration-SHIM.toml is a link to that copy, before a
    file of its own."""
    sample = REPO / "configs" / "configuration-qemu.toml"
    for base, shim in ((kata, "qemu"), (kata, "clh"), (kata / "runtime-rs", "qemu-runtime-rs")):
        own = base / "runtimes" / shim
        (own / "config.d").mkdir(parents=True)
        shutil.copy(sample, own / f"configuration-{shim}.toml")
        top = base / f"configuration-{shim}.toml"
        if links:
            top.symlink_to(f"runtimes/{shim}/configuration-{shim}.toml")
        else:
            shutil.copy(sample, top)
    (kata / "configuration.toml").symlink_to("configuration-qemu.toml")


@pytest.mark.parametrize("layout", ["kata-deploy-3.29", "kata-deploy-3.27", "flat"])
def test_every_configuration_reads_the_drop_in_the_init_container_installs(
    tmp_path: Path, layout: str
) -> None:
    # kata-mem serve's --config, and the configuration each shim names (containerd's
    # ConfigPath: kata-deploy's runtimes/SHIM/ copy), are read with kata-mem's settings.
    assert option(serve_container(), "config") == NODE_CONFIG
    (init,) = pod_spec()["initContainers"]
    assert any(m["mountPath"] == KATA_DIR and not m.get("readOnly") for m in init["volumeMounts"])
    assert any(
        m["mountPath"] == KATA_DIR and m["readOnly"] for m in serve_container()["volumeMounts"]
    )
    kata = tmp_path / "kata-containers"
    kata.mkdir()
    if layout == "flat":
        shutil.copy(REPO / "configs" / "configuration-qemu.toml", kata / "configuration-qemu.toml")
    else:
        kata_deploy_node(kata, links=layout == "kata-deploy-3.29")
    src = tmp_path / "50-kata-mem.toml"
    src.write_text(manifest("ConfigMap")["data"]["50-kata-mem.toml"])
    done = run_script(install_script(), kata, src=src)
    assert done.returncode == 0, done.stderr
    configs = [
        *kata.glob("configuration*.toml"),
        *kata.glob("runtimes/*/configuration*.toml"),
        *kata.glob("runtime-rs/configuration*.toml"),
        *kata.glob("runtime-rs/runtimes/*/configuration*.toml"),
    ]
    assert len(configs) == (1 if layout == "flat" else 7)
    for config in configs:
        for named in (config, config.resolve()):
            cfg = load_config(named)
            drop_in = config.resolve().parent / "config.d" / "50-kata-mem.toml"
            assert str(drop_in) in cfg.files, (named, cfg.files)
            assert cfg.settings.state_dir == "/run/kata-mem"
    # Nothing where nothing reads it: a config.d beside links is read by neither runtime.
    assert (kata / "config.d").exists() == (layout != "kata-deploy-3.29")


def test_the_install_refuses_a_node_without_kata(tmp_path: Path) -> None:
    src = tmp_path / "50-kata-mem.toml"
    src.write_text("[kata_mem]\n")
    done = run_script(install_script(), tmp_path, src=src)
    assert done.returncode != 0 and "no Kata configuration" in done.stderr
    assert list(tmp_path.iterdir()) == [src]


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


def test_the_runtimeclass_is_kata_mem_s_own_beside_kata_deploy_s() -> None:
    """The kustomization's RuntimeClass was named kata-qemu, as kata-deploy's own: `kubectl
    apply -k` replaced kata-deploy's, and `kubectl delete -k` deleted it. It has a name of
    kata-mem's own, and runs kata-deploy's handler, the one the NRI plugin is given."""
    from kata_mem.interfaces.runtimeclass import SHORT_NAMES

    rc = manifest("RuntimeClass")
    name, handler = rc["metadata"]["name"], rc["handler"]
    (plugin,) = [c for c in pod_spec()["containers"] if c["name"] == "kata-mem-nri"]
    (handlers,) = [a.split("=", 2)[1] for a in plugin["command"] if a.startswith("-handler=")]
    assert handler == handlers == "kata-qemu"
    kata_deploy = {f"kata-{SHORT_NAMES.get(h, h)}" for h in ("qemu", "clh", "firecracker")}
    kata_deploy |= {f"{n}-runtime-rs" for n in kata_deploy} | {"kata-dragonball"}
    assert name not in kata_deploy and name == "kata-mem-qemu"
    guide = " ".join((REPO / "docs" / "guide" / "kubernetes.md").read_text().split())
    assert f"RuntimeClass `{name}` (kata-deploy's handler `{handler}`)" in guide
    assert f"runtimeClassName: {name}" in guide


def test_every_object_a_kustomization_deletes_is_kata_mem_s() -> None:
    """`kubectl delete -k` deletes every object the kustomization names: each is kata-mem's
    by its name (a cluster-scoped object) or its namespace (kata-mem's own)."""
    for kust in (DEPLOY, UNINSTALL):
        (doc,) = [d for d in yaml.safe_load_all((kust / "kustomization.yaml").read_text()) if d]
        for name in doc["resources"]:
            for obj in yaml.safe_load_all((kust / name).read_text()):
                if obj is None:
                    continue
                meta = obj["metadata"]
                if obj["kind"] in CLUSTER_SCOPED:
                    assert meta["name"].startswith("kata-mem"), (kust, obj["kind"], meta["name"])
                else:
                    assert meta["namespace"].startswith("kata-mem"), (kust, obj["kind"])


def test_the_containerfile_installs_the_wheel_it_is_given() -> None:
    """No version in the wheel's name: the one wheel in dist/, whatever it is;
    the base image's Python is one the package supports."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    text = (DEPLOY / "Containerfile").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert project["version"] not in code
    assert "COPY dist/ /tmp/dist/" in code
    assert "pip install --no-cache-dir /tmp/dist/kata_mem-*-py3-none-any.whl" in code
    assert "install -m 0755 /tmp/dist/kata-mem-nri /usr/local/bin/kata-mem-nri" in code
    python = re.search(r"^FROM \S+/python:(\d+)\.(\d+)-", text, re.M)
    assert python is not None
    bounds = re.fullmatch(r">=(\d+)\.(\d+),<(\d+)\.(\d+)", project["requires-python"])
    assert bounds is not None
    version = tuple(map(int, python.groups()))
    assert tuple(map(int, bounds.groups()[:2])) <= version < tuple(map(int, bounds.groups()[2:]))


def test_the_build_context_is_the_wheel_and_the_plugin_alone() -> None:
    """.containerignore (podman, buildah) and .dockerignore (docker) say the same: every
    path is left out of the context but the wheels in dist/ and the NRI plugin built there
    (a checkout after the demo holds .venv and the test guest, over 100 MB)."""
    ignores = [(REPO / name).read_text() for name in (".containerignore", ".dockerignore")]
    patterns = [
        [line for line in text.splitlines() if line and not line.startswith("#")]
        for text in ignores
    ]
    assert patterns[0] == patterns[1] == ["*", "!dist/*.whl", "!dist/kata-mem-nri"]


def test_the_image_is_named_once_in_the_kustomization() -> None:
    """Every container of the DaemonSet names the image the kustomization rewrites, and the
    kustomization sets this version's tag: an operator edits one place."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    image = image_setting()
    used = {c["image"] for c in pod_spec()["containers"] + pod_spec()["initContainers"]}
    assert used == {f"{image['name']}:{project['version']}"}
    assert image["newTag"] == project["version"]


# -- kubectl apply -k --------------------------------------------------------------------------

#: kustomize's legacy order (sigs.k8s.io/kustomize api/resid/gvk.go, ``orderFirst`` and
#: ``orderLast``): these kinds first and last in this order, every other kind between them
#: by its group_version_kind, then by namespace and name. What ``kubectl apply -k`` sends.
ORDER_FIRST = (
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
    "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap",
    "Secret", "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume",
    "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget",
)  # fmt: skip
ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: The scope of each kind shipped here (an unknown kind fails the test: say which it is).
CLUSTER_SCOPED = {"Namespace", "RuntimeClass"}
NAMESPACED = {"ConfigMap", "DaemonSet"}


def kustomize_key(doc: dict[str, Any]) -> tuple[int, str, str, str]:
    kind = doc["kind"]
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind) - len(ORDER_FIRST)
    elif kind in ORDER_LAST:
        rank = 1 + ORDER_LAST.index(kind)
    else:
        rank = 0
    group, _, version = doc["apiVersion"].rpartition("/")
    gvk = "_".join((group or "~G", version, kind))
    meta = doc["metadata"]
    return rank, gvk, meta.get("namespace", ""), meta["name"]


def apply_in_order(docs: list[dict[str, Any]]) -> list[str]:
    """What an API server refuses when ``docs`` are created in this order: each is valid
    against the schemas, and a namespaced object's namespace exists before it."""
    namespaces = {"default", "kube-system"}
    refused = []
    for doc in docs:
        validate(doc, KUBERNETES, strict=True)
        kind, meta = doc["kind"], doc["metadata"]
        assert kind in CLUSTER_SCOPED | NAMESPACED, f"{kind}: which scope is it?"
        if kind in NAMESPACED and meta.get("namespace", "default") not in namespaces:
            refused.append(f'{kind} {meta["name"]}: namespaces "{meta["namespace"]}" not found')
        if kind == "Namespace":
            namespaces.add(meta["name"])
    return refused


def test_the_kustomization_lists_every_manifest_of_the_directory() -> None:
    listed = {p.name for p in MANIFESTS}
    assert listed == {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}


def test_kubectl_apply_k_creates_each_object_after_its_namespace() -> None:
    docs = sorted((d for p in MANIFESTS for d in documents(p.name)), key=kustomize_key)
    assert [d["kind"] for d in docs] == ["Namespace", "ConfigMap", "DaemonSet", "RuntimeClass"]
    assert apply_in_order(docs) == []


def test_kubectl_apply_f_of_the_directory_would_not() -> None:
    """The check above can fail: the files in the order ``kubectl apply -f DIR`` takes them
    (by name) put the ConfigMap and the DaemonSet before their namespace, which is why the docs say ``-k``."""
    docs = [d for p in sorted(DEPLOY.glob("*.yaml")) if p in MANIFESTS for d in documents(p.name)]
    assert apply_in_order(docs) == [
        f'{kind} kata-mem: namespaces "kata-mem" not found' for kind in ("ConfigMap", "DaemonSet")
    ]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """What ``kubectl kustomize DIRECTORY`` builds, document by document."""
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_kustomize_gives_that_order_and_image() -> None:
    """Where kubectl is installed (Debian does not package it), its own kustomize agrees
    with the order modelled above and rewrites the image."""
    built = kustomize(DEPLOY)
    ours = sorted((d for p in MANIFESTS for d in documents(p.name)), key=kustomize_key)
    assert [(d["kind"], d["metadata"]["name"]) for d in built] == [
        (d["kind"], d["metadata"]["name"]) for d in ours
    ]
    image = image_setting()
    (ds,) = [d for d in built if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert {c["image"] for c in spec["containers"] + spec["initContainers"]} == {
        f"{image['newName']}:{image['newTag']}"
    }


# -- metrics -----------------------------------------------------------------------------------

RULES = REPO / "deploy" / "prometheus" / "kata-mem-rules.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "kata-mem-rules.test.yaml"


def test_prometheus_scrapes_the_port_serve_listens_on() -> None:
    from kata_mem.interfaces.listener import MetricsAddress

    address = MetricsAddress.parse(option(serve_container(), "metrics-address"))
    annotations = manifest("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(address.port)
    assert annotations["prometheus.io/path"] == "/metrics"
    (port,) = serve_container()["ports"]
    assert (port["name"], port["containerPort"], port["protocol"]) == (
        "metrics",
        address.port,
        "TCP",
    )
    # On the pod's address, not its loopback: Prometheus scrapes the pod IP.
    assert address.host == "0.0.0.0"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_the_alerts_read_only_metrics_kata_mem_serves() -> None:
    from kata_mem.interfaces.metrics import Metrics

    exposed = set(re.findall(r"^# TYPE (\S+) (\S+)", Metrics("/nonexistent").text().decode(), re.M))
    names = {n for n, _ in exposed} | {f"{n}_bucket" for n, t in exposed if t == "histogram"}
    for counter in [n for n, t in exposed if t == "counter"]:
        assert counter.endswith("_total")
    used = {m for rule in alerts() for m in re.findall(r"\b(kata_mem_[a-z_]+)\b", rule["expr"])}
    assert used and sorted(used - names) == []


@pytest.mark.prometheus
def test_promtool_checks_the_rules_and_fires_every_alert() -> None:
    check = subprocess.run(
        ["promtool", "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == {r["alert"] for r in alerts()}


def test_the_service_guide_names_every_alert() -> None:
    guide = (REPO / "docs" / "guide" / "service.md").read_text()
    assert sorted(r["alert"] for r in alerts() if f"`{r['alert']}`" not in guide) == []


# -- uninstall ---------------------------------------------------------------------------------

UNINSTALL = DEPLOY / "uninstall"


def uninstall_docs() -> list[dict[str, Any]]:
    (kust,) = [d for d in yaml.safe_load_all((UNINSTALL / "kustomization.yaml").read_text()) if d]
    return [
        d
        for name in kust["resources"]
        for d in yaml.safe_load_all((UNINSTALL / name).read_text())
        if d is not None
    ]


def test_the_uninstall_manifests_apply_in_kubectl_s_order() -> None:
    docs = sorted(uninstall_docs(), key=kustomize_key)
    assert [d["kind"] for d in docs] == ["Namespace", "DaemonSet"]
    assert apply_in_order(docs) == []


def removal_script() -> str:
    """The uninstall init container's script."""
    (ds,) = [d for d in uninstall_docs() if d["kind"] == "DaemonSet"]
    (init,) = ds["spec"]["template"]["spec"]["initContainers"]
    script: str = init["command"][-1]
    assert f"\nkata={KATA_DIR}\n" in script
    return script


@pytest.mark.parametrize(("links", "written"), [(True, 3), (False, 5)], ids=["3.29", "3.27"])
def test_the_uninstall_removes_every_drop_in_the_install_wrote(
    tmp_path: Path, links: bool, written: int
) -> None:
    kata = tmp_path / "kata containers"  # a space: each path stays whole
    kata.mkdir()
    kata_deploy_node(kata, links)
    src = tmp_path / "50-kata-mem.toml"
    src.write_text(manifest("ConfigMap")["data"]["50-kata-mem.toml"])
    assert run_script(install_script(), kata, src=src).returncode == 0
    # 3.29: runtimes/qemu, runtimes/clh, runtime-rs/runtimes/qemu-runtime-rs; 3.27 also
    # the config.d beside the top-level files, which are files of their own there.
    assert len(list(kata.rglob("50-kata-mem.toml"))) == written
    # A link named as the drop-in is not the install's: left, and so is what it leads to.
    other = tmp_path / "other.toml"
    other.write_text("[kata_mem]\n")
    (kata / "extra" / "config.d").mkdir(parents=True)
    (kata / "extra" / "config.d" / "50-kata-mem.toml").symlink_to(other)
    done = run_script(removal_script(), kata)
    assert done.returncode == 0, done.stderr
    assert [p.relative_to(kata) for p in kata.rglob("50-kata-mem.toml")] == [
        Path("extra/config.d/50-kata-mem.toml")
    ]
    assert other.read_text() == "[kata_mem]\n"
    assert done.stdout.count("removed ") == written


@pytest.mark.parametrize(
    ("content", "removed"),
    [
        (None, False),  # nothing there: nothing to do
        ("[kata_mem]\nsizing = 'kata'\n", True),
        ("# kata-mem\n  [kata_mem]  \nstate_dir = '/run/kata-mem'\n", True),
        ("[kata_mem]\n[hypervisor.qemu]\ndefault_memory = 4096\n", False),  # someone's edit
    ],
)
def test_the_uninstall_removes_only_a_kata_mem_drop_in(
    tmp_path: Path, content: str | None, removed: bool
) -> None:
    drop_in = tmp_path / "runtimes" / "qemu" / "config.d" / "50-kata-mem.toml"
    drop_in.parent.mkdir(parents=True)
    if content is not None:
        drop_in.write_text(content)
    done = run_script(removal_script(), tmp_path)
    assert done.returncode == 0, done.stderr
    assert drop_in.exists() == (content is not None and not removed), done.stdout
    assert ("removed" in done.stdout) == removed
    assert ("nothing to remove" in done.stdout) == (content is None)


def test_the_image_is_set_in_one_file_for_the_install_and_the_uninstall() -> None:
    """The guide has the operator set the image in one file; the uninstall DaemonSet ran
    registry.example's until its own kustomization was edited too (an image that does not
    exist: `rollout status` waited on ImagePullBackOff). One file under deploy/ sets
    `images`, and both kustomizations take it in."""
    setting = sorted(
        str(p.relative_to(REPO))
        for p in DEPLOY.rglob("kustomization.yaml")
        for d in yaml.safe_load_all(p.read_text())
        if d and "images" in d
    )
    assert len(setting) == 1, setting
    page = " ".join((REPO / "docs" / "guide" / "kubernetes.md").read_text().split())
    assert f"under `images:` in `{setting[0]}`" in page
    for kust in (DEPLOY / "kustomization.yaml", UNINSTALL / "kustomization.yaml"):
        (doc,) = [d for d in yaml.safe_load_all(kust.read_text()) if d]
        assert [
            str((kust.parent / c / "kustomization.yaml").resolve().relative_to(REPO))
            for c in doc.get("components", [])
        ] == setting, kust


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_kustomize_gives_both_daemonsets_the_image_set_once(tmp_path: Path) -> None:
    """A copy of deploy/kubernetes with another image set in that one file: kubectl's own
    kustomize gives it to every container of the install and of the uninstall."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(DEPLOY, copy)
    (setting,) = [
        p
        for p in copy.rglob("kustomization.yaml")
        for d in yaml.safe_load_all(p.read_text())
        if d and "images" in d
    ]
    text = setting.read_text()
    assert "newName: registry.example/kata-mem\n" in text
    setting.write_text(
        text.replace("newName: registry.example/kata-mem\n", "newName: my.registry/kata-mem\n")
    )
    for built in (copy, copy / "uninstall"):
        images = {
            c["image"]
            for d in kustomize(built)
            if d["kind"] == "DaemonSet"
            for c in d["spec"]["template"]["spec"]["containers"]
            + d["spec"]["template"]["spec"]["initContainers"]
        }
        assert images == {"my.registry/kata-mem:0.1.0"}, built
