"""kata-mem's container of ``deploy/kubernetes/daemonset.yaml``, run on this machine the
way a node runs it, without a cluster: read from the manifest, not restated here.

What the kubelet and a CRI runtime give the container, and how it is made here:

- its own cgroup (a sibling memory cgroup of the test's, :class:`~tests.support.memcg.
  MemoryCgroup`) and its own **cgroup namespace** rooted there (``unshare --cgroup``):
  containerd and CRI-O give every pod one on cgroup v2 nodes, so ``/proc/PID/cgroup``
  and mountinfo show paths relative to it;
- its own **mount namespace** (``unshare --mount``, private propagation) holding the
  manifest's ``volumeMounts``: each ``hostPath`` volume bind-mounted at its ``mountPath``
  (read-only where the manifest says so, recursively: the cgroup tree's controllers are
  mounts of their own), the host paths mapped to the test's directories by the caller
  (the cgroup tree stays the real one); ``readOnlyRootFilesystem`` as ``/`` remounted
  read-only in that namespace only (a bind remount: the host's ``/`` is untouched);
  mount points that do not exist on this machine are made inside a tmpfs over their
  first missing parent's parent (``/run``, ``/opt``), in the namespace only;
- the **pid namespace** shared when ``hostPID: true`` (the only form the harness runs);
- its own **network namespace** unless ``hostNetwork: true`` (``unshare --net``): the
  metrics address the manifest gives (``0.0.0.0:9464``) is the pod's own, never this
  machine's; the unix socket is a file, reached through the state directory's mount;
- the **securityContext**: ``runAsUser``/``runAsGroup``, every capability dropped from
  the bounding, inheritable and ambient sets (``capabilities.drop: [ALL]``) and
  ``no_new_privs`` (``allowPrivilegeEscalation: false``), by ``setpriv``; the container's
  ``env`` and ``args``. Not emulated: the seccomp profile and the image's own root
  filesystem (this machine's is used, read-only).

``kubectl exec`` is :meth:`Pod.exec`: a process moved into the container's cgroup, then
into its namespaces (``nsenter``), under the same securityContext.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from tests.support.memcg import MemoryCgroup
from tests.support.paths import REPO

DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"


class Unsupported(Exception):
    """The manifest asks for something this harness does not emulate (it says what)."""


@dataclass(frozen=True)
class Mount:
    source: str  # a path of this machine
    target: str  # the container's mountPath
    read_only: bool


@dataclass(frozen=True)
class Container:
    """The parts of the manifest's container that the harness applies."""

    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    uid: int
    gid: int
    no_new_privs: bool
    drop_all: bool
    read_only_root: bool
    host_pid: bool
    host_network: bool
    mounts: tuple[Mount, ...]
    probe: tuple[str, ...]

    @classmethod
    def read(cls, host_paths: Mapping[str, str], name: str = "kata-mem") -> Container:
        """The container ``name`` of the DaemonSet, its hostPath volumes mapped by
        ``host_paths`` (manifest host path -> this machine's path; one not mapped is
        used as it is, as the cgroup tree is).

        :raises Unsupported: a volume that is neither hostPath nor mapped, no hostPID.
        """
        spec = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]
        (c,) = [c for c in spec["containers"] if c["name"] == name]
        if not spec.get("hostPID"):
            raise Unsupported("hostPID is not true: the harness shares this machine's pids")
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = []
        for m in c.get("volumeMounts", []):
            volume = volumes[m["name"]]
            if "hostPath" not in volume:
                raise Unsupported(f"volume {m['name']}: only hostPath volumes are emulated")
            host = volume["hostPath"]["path"]
            mounts.append(
                Mount(host_paths.get(host, host), m["mountPath"], bool(m.get("readOnly")))
            )
        sc: dict[str, Any] = c.get("securityContext", {})
        caps = sc.get("capabilities", {})
        probe = c["livenessProbe"]["exec"]["command"]
        return cls(
            args=tuple(c["args"]),
            env=tuple((e["name"], e["value"]) for e in c.get("env", [])),
            uid=int(sc.get("runAsUser", 0)),
            gid=int(sc.get("runAsGroup", 0)),
            no_new_privs=sc.get("allowPrivilegeEscalation") is False,
            drop_all="ALL" in caps.get("drop", []),
            read_only_root=bool(sc.get("readOnlyRootFilesystem")),
            host_pid=True,
            host_network=bool(spec.get("hostNetwork")),
            mounts=tuple(mounts),
            probe=tuple(probe),
        )

    def setpriv(self) -> list[str]:
        """``setpriv`` as the securityContext asks (an exec'd root keeps no capability
        outside the bounding set)."""
        argv = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        if self.drop_all:
            argv += ["--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]
        if self.no_new_privs:
            argv.append("--no-new-privs")
        return [*argv, "--"]

    def mount_script(self) -> str:
        """The shell lines that lay the container's mounts in its new mount namespace."""
        lines = ["set -eu"]
        if not self.host_network:
            lines.append("ip link set lo up")  # as the runtime gives a pod its loopback
        made: set[str] = set()
        for m in self.mounts:
            missing = Path(m.target)
            while not missing.parent.exists():
                missing = missing.parent
            if not missing.exists():
                # The first missing directory's parent gets a tmpfs, in this namespace.
                over = str(missing.parent)
                if over not in made and over != "/":
                    lines.append(f"mount -t tmpfs -o mode=0755 kata-mem-pod {shlex.quote(over)}")
                    made.add(over)
        for m in self.mounts:
            src, dst = shlex.quote(m.source), shlex.quote(m.target)
            lines.append(f"mkdir -p {dst}")
            lines.append(f"mount --rbind {src} {dst}")
        if self.read_only_root:
            lines.append("mount -o remount,bind,ro /")
        for m in self.mounts:
            if m.read_only:
                # Every mount at or below the target (the cgroup tree's controllers too),
                # each as a bind remount: only this namespace's view changes.
                lines.append(
                    "awk -v t=" + shlex.quote(m.target) + ' \'$5 == t || index($5, t "/") == 1 '
                    "{print $5}' /proc/self/mountinfo | while read -r p; do "
                    # a mount hidden under the new one has no path left to remount by
                    'if [ -e "$p" ]; then mount -o remount,bind,ro "$p"; fi; done'
                )
        return "\n".join(lines)


@dataclass
class Pod:
    """The running container: its main process (``serve``), its cgroup and log."""

    container: Container
    cgroup: MemoryCgroup
    log: Path
    env: dict[str, str]
    proc: Optional[subprocess.Popen[str]] = None
    extra_args: Sequence[str] = field(default_factory=tuple)

    @classmethod
    def start(
        cls,
        container: Container,
        log: Path,
        extra_args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
    ) -> Pod:
        cgroup = MemoryCgroup.create("kata-mem-pod")
        run_env = {**os.environ, **dict(container.env), **(env or {})}
        run_env["PYTHONPATH"] = str(REPO)
        pod = cls(container, cgroup, log, run_env, extra_args=tuple(extra_args))
        argv = [*pod._kata_mem(), *container.args, *extra_args]
        script = (
            f"{container.mount_script()}\ncd /\nexec {shlex.join([*container.setpriv(), *argv])}"
        )
        net = "" if container.host_network else "--net "
        enter = (
            'echo $$ > "$0" && exec unshare --cgroup --mount '
            + net
            + '--propagation private sh -c "$1"'
        )
        with log.open("w") as err:
            pod.proc = subprocess.Popen(
                ["sh", "-c", enter, str(cgroup.procs_file), script],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=run_env,
                text=True,
            )
        cgroup.pids.append(pod.proc.pid)
        return pod

    def _kata_mem(self) -> list[str]:
        # The image's entry point is kata-mem; here, this tree's, by the interpreter running
        # the tests (it reads no bytecode it would write: PYTHONDONTWRITEBYTECODE, as set).
        return [sys.executable, "-m", "kata_mem"]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def exec(
        self, argv: Sequence[str], timeout: float = 300, stdin: Optional[str] = None
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl exec``: ``argv`` in the container's cgroup and namespaces, under its
        securityContext, from ``/``."""
        # $1: the container's cgroup.procs, $2: its main process, then the command.
        net = "" if self.container.host_network else "--net "
        script = (
            'echo $$ > "$1" && exec nsenter --target "$2" --cgroup --mount '
            + net
            + '--wd=/ -- "${@:3}"'
        )
        return subprocess.run(
            [
                "bash",
                "-c",
                script,
                "exec",
                str(self.cgroup.procs_file),
                str(self.pid),
                *self.container.setpriv(),
                *argv,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            check=False,
        )

    def kata_mem(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``kubectl exec POD -- kata-mem ARGS``."""
        return self.exec([*self._kata_mem(), *args], timeout=timeout)

    def probe(self) -> subprocess.CompletedProcess[str]:
        """The manifest's liveness (and readiness) probe, exec'd in the container as the
        kubelet runs it (``python3`` is the test's interpreter)."""
        argv = list(self.container.probe)
        assert argv[0] == "python3", argv
        return self.exec([sys.executable, *argv[1:]], timeout=60)

    def stop(self) -> int:
        """SIGTERM, as the kubelet stops a container; the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.cgroup.remove()
        return code

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")
