"""A DaemonSet of ``deploy/kubernetes/`` run on a node of the rig (tests/support/node.py) the
way the kubelet runs its pod: the pod template, with the image kustomize gives it
(``deploy/kubernetes/image/``), turned into the CRI calls the kubelet makes, through crictl:
RunPodSandbox, then each init container to its end (it must exit 0), then every container,
created and started. Read from the manifests, not restated here.

What the kubelet gives the pod and its containers (kubernetes ``pkg/kubelet/kuberuntime``:
``generatePodSandboxConfig``, ``generateContainerConfig``, ``generateLinuxContainerConfig``,
``security_context.go``; ``pkg/securitycontext/util.go`` for the /proc paths), made so here:

- the sandbox: the pod's labels and annotations, ``hostPID`` as the node's PID namespace,
  the ports as port mappings, its cgroup parent;
- ``hostPath`` volumes: a bind mount of the directory the caller maps the host path to
  (one not mapped is used as it is, as ``/sys/fs/cgroup`` is), read-only where the
  ``volumeMount`` says so, made first for ``DirectoryOrCreate`` (0755), required for
  ``Directory``; ``configMap`` volumes: a directory holding the ConfigMap's files
  (mode 0644, the volume's default), mounted read-only;
- each container: the image, ``command``, ``args`` and ``env`` as written (an empty
  ``command`` leaves the image's entrypoint), the ``securityContext`` (``runAsUser``,
  ``runAsGroup``, ``capabilities.drop``, ``readOnlyRootFilesystem``,
  ``allowPrivilegeEscalation: false`` as no_new_privs, ``seccompProfile: RuntimeDefault``),
  the /proc paths Kubernetes masks and makes read-only, its memory limit and CPU shares.

Not as on a cluster: the pod shares the node's network namespace (the rig has no CNI), so
a listening address can be replaced (``replace_args``); the kubelet's own mounts
(``/etc/hosts``, ``/dev/termination-log``) are not made; probes are what the test runs
(``DaemonSetPod.probe``: the ``exec`` command through crictl's ExecSync, as the kubelet).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from kata_mem.core.quantity import parse_quantity
from tests.support.node import Node
from tests.support.paths import REPO
from tests.support.waits import wait_until

DEPLOY = REPO / "deploy" / "kubernetes"
#: CRI NamespaceMode (cri-api api.proto): POD, CONTAINER, NODE.
POD, NODE = 0, 2
#: Kubernetes' masked and read-only /proc and /sys paths (pkg/securitycontext/util.go,
#: defaultMaskedPaths and defaultReadonlyPaths, procMount Default).
MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READONLY_PATHS = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kustomized_image(image: str) -> str:
    """``image`` as the image Component rewrites it (kustomize ``images``: an entry whose
    ``name`` is the image's name takes its ``newName`` and ``newTag``)."""
    (component,) = documents(DEPLOY / "image" / "kustomization.yaml")
    name, _, tag = image.partition(":")
    for entry in component["images"]:
        if entry["name"] == name:
            return f"{entry.get('newName', name)}:{entry.get('newTag', tag)}"
    return image


def daemonset(path: Path) -> dict[str, Any]:
    """The DaemonSet of ``path`` (a manifest under deploy/kubernetes)."""
    (found,) = [d for d in documents(path) if d["kind"] == "DaemonSet"]
    return found


def config_map_data(name: str) -> dict[str, str]:
    """The data of the ConfigMap ``name`` of deploy/kubernetes/configmap.yaml."""
    (found,) = [
        d
        for d in documents(DEPLOY / "configmap.yaml")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name
    ]
    data: dict[str, str] = found["data"]
    return data


def cpu_shares(request: str) -> int:
    """The kubelet's CPU shares for a CPU request (milliCPUToShares: 1024 per CPU, at
    least 2)."""
    return max(2, int(parse_quantity(request) * 1024))


@dataclass
class DaemonSetPod:
    """One pod of a DaemonSet on ``node``: its sandbox and containers, by name."""

    node: Node
    manifest: Path
    #: host path of a hostPath volume -> the directory of this machine that stands for it
    host_paths: Mapping[str, Path]
    #: a directory for the ConfigMaps' files
    where: Path
    #: container name -> {argument as written: the one to run instead}
    replace_args: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pod: Optional[str] = None
    ids: dict[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = daemonset(self.manifest)["spec"]["template"]["spec"]
        return spec

    def images(self) -> set[str]:
        """What its containers run, after kustomize."""
        spec = self.spec
        return {
            kustomized_image(c["image"])
            for c in spec.get("initContainers", []) + spec["containers"]
        }

    # -- the kubelet ----------------------------------------------------------------------
    def run(self, cgroup_parent: str, timeout: float = 60) -> DaemonSetPod:
        """RunPodSandbox, every init container to its exit (0, or AssertionError with its
        log), every container started."""
        ds = daemonset(self.manifest)
        template = ds["spec"]["template"]
        spec = template["spec"]
        self.where.mkdir(parents=True, exist_ok=True)
        name = ds["metadata"]["name"]
        namespace = ds["metadata"]["namespace"]
        uid = str(uuid.uuid4())
        ports = [
            {
                "protocol": 0 if p.get("protocol", "TCP") == "TCP" else 1,
                "container_port": p["containerPort"],
            }
            for c in spec["containers"]
            for p in c.get("ports", [])
        ]
        sandbox = {
            "metadata": {"name": f"{name}-node", "namespace": namespace, "uid": uid, "attempt": 0},
            "log_directory": str(self.node.dir / "logs" / f"{namespace}_{name}_{uid}"),
            "labels": {
                **template["metadata"].get("labels", {}),
                "io.kubernetes.pod.name": f"{name}-node",
                "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.uid": uid,
            },
            "annotations": dict(template["metadata"].get("annotations", {})),
            "port_mappings": ports,
            "linux": {
                "cgroup_parent": cgroup_parent,
                "security_context": {"namespace_options": self._namespaces(spec)},
            },
        }
        self.pod = self.node.run_sandbox(sandbox)
        for container in spec.get("initContainers", []):
            cid = self._create(container, spec)
            self.node.crictl("start", cid)
            self._wait_success(container["name"], timeout)
        for container in spec["containers"]:
            self.node.crictl("start", self._create(container, spec))
        return self

    def _wait_success(self, name: str, timeout: float) -> None:
        """Until the container ``name`` has exited; AssertionError unless with 0."""

        def exited() -> Optional[dict[str, Any]]:
            status = self.status(name)
            return status if status["state"] == "CONTAINER_EXITED" else None

        status = wait_until(exited, lambda: f"{name} exited:\n{self.logs(name)}", timeout)
        assert status is not None
        assert status["exitCode"] == 0, f"{name} exited {status['exitCode']}:\n{self.logs(name)}"

    def _namespaces(self, spec: Mapping[str, Any]) -> dict[str, int]:
        # The rig has no CNI: the node's network namespace whatever hostNetwork says.
        return {"network": NODE, "pid": NODE if spec.get("hostPID") else POD, "ipc": POD}

    def _create(self, container: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
        name = container["name"]
        sc = container.get("securityContext", {})
        security: dict[str, Any] = {
            "namespace_options": self._namespaces(spec),
            "privileged": bool(sc.get("privileged", False)),
            "readonly_rootfs": bool(sc.get("readOnlyRootFilesystem", False)),
            "no_new_privs": sc.get("allowPrivilegeEscalation") is False,
            "capabilities": {
                "drop_capabilities": list(sc.get("capabilities", {}).get("drop", [])),
                "add_capabilities": list(sc.get("capabilities", {}).get("add", [])),
            },
            "masked_paths": list(MASKED_PATHS),
            "readonly_paths": list(READONLY_PATHS),
        }
        if "runAsUser" in sc:
            security["run_as_user"] = {"value": sc["runAsUser"]}
        if "runAsGroup" in sc:
            security["run_as_group"] = {"value": sc["runAsGroup"]}
        seccomp = sc.get("seccompProfile", {}).get("type")
        if seccomp is not None:
            assert seccomp == "RuntimeDefault", f"{name}: seccomp {seccomp} is not emulated"
            security["seccomp"] = {"profile_type": 0}  # SecurityProfile.RuntimeDefault
        resources: dict[str, int] = {}
        requests = container.get("resources", {}).get("requests", {})
        limits = container.get("resources", {}).get("limits", {})
        if "cpu" in requests:
            resources["cpu_shares"] = cpu_shares(requests["cpu"])
        if "memory" in limits:
            resources["memory_limit_in_bytes"] = int(parse_quantity(limits["memory"]))
        args = list(container.get("args", []))
        for old, new in self.replace_args.get(name, {}).items():
            assert old in args, f"{name}: no argument {old!r} to replace in {args}"
            args[args.index(old)] = new
        config = {
            "metadata": {"name": name, "attempt": 0},
            "image": {"image": kustomized_image(container["image"])},
            "command": list(container.get("command", [])),
            "args": args,
            "envs": [{"key": e["name"], "value": e["value"]} for e in container.get("env", [])],
            "mounts": self._mounts(container, spec),
            "labels": {"io.kubernetes.container.name": name},
            "log_path": f"{name}/0.log",
            "linux": {"resources": resources, "security_context": security},
        }
        assert self.pod is not None
        cid = self.node.create(self.pod, config)
        self.ids[name] = cid
        return cid

    def _mounts(
        self, container: Mapping[str, Any], spec: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = []
        for m in container.get("volumeMounts", []):
            volume = volumes[m["name"]]
            read_only = bool(m.get("readOnly", False))
            if "hostPath" in volume:
                path = volume["hostPath"]["path"]
                source = self.host_paths.get(path, Path(path))
                kind = volume["hostPath"].get("type", "")
                if kind == "DirectoryOrCreate":
                    source.mkdir(mode=0o755, parents=True, exist_ok=True)
                elif kind == "Directory":
                    assert source.is_dir(), f"hostPath {path} ({source}): not a directory"
                else:
                    raise AssertionError(f"hostPath type {kind!r} of {m['name']} is not emulated")
            elif "configMap" in volume:
                source = self.where / "configmaps" / volume["configMap"]["name"]
                source.mkdir(mode=0o755, parents=True, exist_ok=True)
                for file, text in config_map_data(volume["configMap"]["name"]).items():
                    (source / file).write_text(text)
                    (source / file).chmod(0o644)
                read_only = True  # the kubelet mounts a ConfigMap read-only, always
            else:
                raise AssertionError(f"volume {m['name']}: neither hostPath nor configMap")
            mounts.append(
                {"container_path": m["mountPath"], "host_path": str(source), "readonly": read_only}
            )
        return mounts

    # -- what an operator looks at ----------------------------------------------------------
    def status(self, name: str) -> dict[str, Any]:
        """ContainerStatus (``crictl inspect``): state, exitCode, ..."""
        status: dict[str, Any] = json.loads(
            self.node.crictl("inspect", "-o", "json", self.ids[name])
        )["status"]
        return status

    def logs(self, name: str) -> str:
        """``kubectl logs -c NAME``: what the container wrote (stdout and stderr)."""
        if name not in self.ids:
            return ""
        done = self.node._crictl_run("logs", self.ids[name])
        return done.stdout + done.stderr

    def exec(
        self, name: str, argv: Sequence[str], timeout: float = 10
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl exec -c NAME -- ARGV``: ExecSync, its exit code crictl's."""
        return self.node._crictl_run(
            "exec",
            "--sync",
            "--timeout",
            f"{timeout:g}",
            self.ids[name],
            *argv,
            timeout=timeout + 30,
        )

    def probe(self, name: str, kind: str = "readinessProbe") -> subprocess.CompletedProcess[str]:
        """The container's ``exec`` probe, run as the kubelet runs it (ExecSync, with the
        probe's timeout)."""
        (container,) = [c for c in self.spec["containers"] if c["name"] == name]
        probe = container[kind]
        return self.exec(name, probe["exec"]["command"], timeout=probe.get("timeoutSeconds", 1))

    def stop(self, name: str) -> dict[str, Any]:
        """StopContainer with the pod's grace period (SIGTERM, then SIGKILL); its status."""
        grace = self.spec.get("terminationGracePeriodSeconds", 30)
        self.node.crictl("stop", "--timeout", str(grace), self.ids[name], timeout=grace + 30)
        return self.status(name)

    def remove(self) -> None:
        """StopPodSandbox and RemovePodSandbox."""
        if self.pod is not None:
            self.node.crictl("stopp", self.pod)
            self.node.crictl("rmp", self.pod)
            self.pod = None
