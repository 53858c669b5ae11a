"""A real Kubernetes node runtime on this machine, for the end-to-end tests: containerd with
NRI (built from its Go module at a pinned version by ``scripts/build-node-rig.sh``), runc
from Debian, crictl, a pause image built and imported here, and the programs of
``tests/go``: ``cri-call`` (the CRI calls crictl does not make) and ``nri-recorder`` (an NRI
plugin that records what it gets). Nothing is faked.

    rig = build_rig()                               # once a session (the fixture does it)
    with Node(rig, "v2.3") as node:                 # a containerd in a temporary directory
        rec = node.start_recorder()                 # an NRI plugin on the node's nri.sock
        pod = node.run_pod("p", KATA_HANDLER, cgroup_parent, resources=resources(memory=...))
        ctr = node.create_container(pod, "c", memory_limit=128 * MiB)
        node.update_sandbox(pod, memory=..., overhead=...)   # -> CriStatus(code, message, ...)
        rec.wait_for("UpdatePodSandbox")
        node.restart()                              # containerd again; the pods go on

Each :class:`Node` lives in its own directory (``/tmp/kmnode-*``: short, because unix
socket paths are, and the shims' socket directory may be at most 42 characters): containerd's
root and state, its socket, the NRI socket ``nri.sock`` (in a directory of its own,
``run-nri``: a node's ``/var/run/nri``, which the DaemonSet mounts), NRI's plugin directories, runc's
root, the shims' sockets (``socket_dir`` of ``io.containerd.shim.v1.manager``: unset, it is
``/run/containerd/s`` whatever the state directory), CNI's directories (empty: no CNI),
CDI's spec directory (v2.4 has CDI always on: its ``enable_cdi`` is gone), logs.
:meth:`Node.stop` kills every process the node started (containerd, its shims and what they
run, the recorders), removes the cgroups runc left and the directories of the pods'
``cgroup_parent`` paths that runc made (in every hierarchy where they did not exist: runc
1.1 with cgroupfs makes the path in each v1 controller, name=systemd and the v2 one; noted
in :data:`MADE_CGROUPS`, so that of nodes in parallel test processes, which share the
ancestors, the last to stop removes them), unmounts every mount under the directory and
removes it: nothing else.

Pods run in the host's network namespace without a hostname (no CNI config: the CRI reports
NetworkReady false, and host-network pods run all the same). The pause image is the sandbox
image (``pinned_images.sandbox``) and every container's image, so nothing is ever pulled.
Two runtime handlers, both runc (``io.containerd.runc.v2``, cgroupfs: ``SystemdCgroup =
false``): ``runc``, :data:`KATA_HANDLER`, named as kata-deploy 4.x names its runtime-rs
QEMU handler, and :data:`KATA_GO_HANDLER`, its Go runtime's (the one the DaemonSet's plugin
is given), both with kata-deploy's ``pod_annotations``. :meth:`Node.import_image` imports
any other image (an OCI layout tar) as the pause image is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple, Optional, Union

import psutil

from tests.support.builds import build
from tests.support.oci_image import go_arch, write_image_tar
from tests.support.paths import REPO
from tests.support.waits import wait_until

#: The containerd series the rig builds (tests/rig/containerd-<series>/go.mod pins each).
SERIES = ("v2.3", "v2.4")
#: kata-deploy 4.x's handler of Kata's runtime-rs with QEMU; here runc is behind it.
KATA_HANDLER = "kata-qemu-runtime-rs"
#: kata-deploy's handler of Kata's Go runtime with QEMU; here runc is behind it too.
KATA_GO_HANDLER = "kata-qemu"
RUNC_HANDLER = "runc"
PAUSE_IMAGE = "localhost/kata-mem-test/pause:1"
NRI_MODULE = "github.com/containerd/nri"
#: The containerd namespace of the CRI.
K8S_NAMESPACE = "k8s.io"
#: The pods' Kubernetes namespace (metadata).
POD_NAMESPACE = "kata-mem-test"
DEFAULT_RIG_DIR = REPO / ".cache" / "rig"
BUILD_SCRIPT = REPO / "scripts" / "build-node-rig.sh"
MiB = 1 << 20

#: A CRI LinuxContainerResources as JSON (snake_case names: memory_limit_in_bytes,
#: cpu_quota, cpu_period, cpu_shares, ...).
Resources = Mapping[str, int]


class RigUnavailable(Exception):
    """This machine cannot run the rig at all; the message says what it lacks."""


class NodeError(Exception):
    """A command of the rig failed; the message has its output."""


def machine_lacks() -> Optional[str]:
    """Why this machine cannot run a node at all (tests skip with it), or None."""
    if sys.platform != "linux":
        return f"containerd with runc needs Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "the node rig runs containerd and runc and mounts overlays: it needs root"
    filesystems = Path("/proc/filesystems").read_text().split()
    module = Path("/lib/modules", os.uname().release, "kernel/fs/overlayfs")
    if "overlay" not in filesystems and not list(module.glob("overlay.ko*")):
        return "the kernel has no overlay filesystem (containerd's overlayfs snapshotter)"
    return None


def pinned_version(module_dir: Path, module: str) -> str:
    """The version ``module_dir/go.mod`` requires of ``module``."""
    for line in (module_dir / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == module:
            return words[1]
    raise AssertionError(f"{module_dir}/go.mod does not require {module}")


def containerd_version(series: str) -> str:
    """The containerd version pinned for ``series`` (``v2.3`` -> ``v2.3.7``)."""
    module_dir = REPO / "tests" / "rig" / f"containerd-{series}"
    return pinned_version(module_dir, "github.com/containerd/containerd/v2")


@dataclass(frozen=True)
class Rig:
    """Where the built binaries are."""

    dir: Path
    runc: Path

    def containerd_bin(self, series: str) -> Path:
        return self.dir / f"containerd-{containerd_version(series)}" / "bin"

    @property
    def crictl(self) -> Path:
        version = pinned_version(REPO / "tests" / "rig" / "cri-tools", "sigs.k8s.io/cri-tools")
        return self.dir / f"crictl-{version}" / "bin" / "crictl"

    def program(self, name: str) -> Path:
        """``cri-call``, ``nri-recorder`` or ``pause`` (tests/go/cmd)."""
        return self.dir / "test-programs" / "bin" / name

    @property
    def pause_tar(self) -> Path:
        return self.dir / "pause-image.tar"


def build_rig(out: Path = DEFAULT_RIG_DIR) -> Rig:
    """Build (or find built) every binary with scripts/build-node-rig.sh, and write the pause
    image's tar. :raises RigUnavailable: the machine cannot run a node at all;
    :raises NodeError: the build failed, or runc is missing (scripts/install-system-deps.sh
    node installs it)."""
    lacking = machine_lacks()
    if lacking:
        raise RigUnavailable(lacking)
    failed = build(BUILD_SCRIPT, out)
    if failed is not None:
        raise NodeError(failed)
    runc = shutil.which("runc")
    if runc is None:
        raise NodeError("runc not found: run scripts/install-system-deps.sh node")
    rig = Rig(dir=out, runc=Path(runc))
    write_image_tar(rig.program("pause"), rig.pause_tar, PAUSE_IMAGE)
    return rig


def resources(
    memory: Optional[int] = None,
    cpu_quota: Optional[int] = None,
    cpu_period: Optional[int] = None,
    cpu_shares: Optional[int] = None,
) -> dict[str, int]:
    """A LinuxContainerResources with the fields given."""
    fields = {
        "memory_limit_in_bytes": memory,
        "cpu_quota": cpu_quota,
        "cpu_period": cpu_period,
        "cpu_shares": cpu_shares,
    }
    return {key: value for key, value in fields.items() if value is not None}


class CriStatus(NamedTuple):
    """What a CRI call gave: the gRPC status code's name ("OK", "Unknown", ...), its message,
    and how long the call took."""

    code: str
    message: str
    elapsed_ms: float


# -- cgroups -------------------------------------------------------------------------------


def cgroup_roots() -> list[Path]:
    """The mount points of every cgroup hierarchy (v1 controllers, named ones, and v2)
    that is mounted at its root."""
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-", 6) + 1]
        if fstype in ("cgroup", "cgroup2") and fields[3] == "/":
            roots.append(Path(fields[4]))
    return roots


def hierarchy_path(cgroup_dir: Path) -> str:
    """The path of the cgroup directory ``cgroup_dir`` inside its hierarchy, as a
    ``cgroup_parent`` names it (``/sys/fs/cgroup/memory/a/b`` -> ``/a/b``)."""
    resolved = cgroup_dir.resolve()
    for root in sorted(cgroup_roots(), key=lambda p: len(p.parts), reverse=True):
        if resolved == root or root in resolved.parents:
            return "/" + str(resolved.relative_to(root)).strip(".")
    raise AssertionError(f"{cgroup_dir} is in no mounted cgroup hierarchy")


#: The cgroup directories that a node's runc made for a pod's ``cgroup_parent`` and that no
#: node has removed yet, one a line; also the lock around making and removing them. Nodes
#: of parallel test processes share ancestors (``/process_api/<id>`` of the test's memory
#: cgroup path, mirrored into the other hierarchies): whichever stops last removes them.
MADE_CGROUPS = Path("/run/kata-mem-node-rig.cgroups")


@contextlib.contextmanager
def made_cgroups() -> Iterator[list[str]]:
    """:data:`MADE_CGROUPS` locked (flock), as a list to change in place; written back at
    the end, and removed when it is empty."""
    while True:
        fd = os.open(MADE_CGROUPS, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == MADE_CGROUPS.stat().st_ino:
                break  # not removed by the holder before us
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        with open(fd, "r+", closefd=False) as registry:
            made = registry.read().split()
            yield made
            if made:
                registry.seek(0)
                registry.truncate()
                registry.write("".join(f"{d}\n" for d in made))
            else:
                MADE_CGROUPS.unlink()
    finally:
        os.close(fd)


# -- mounts --------------------------------------------------------------------------------


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or under ``directory``, deepest first."""
    prefix = str(directory).rstrip("/") + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == str(directory) or point.startswith(prefix):
            points.append(Path(point))
    return sorted(points, key=lambda p: len(p.parts), reverse=True)


# -- the NRI recorder ------------------------------------------------------------------------


class Recorder:
    """``nri-recorder`` connected to a node's NRI socket: every event it gets, as dicts
    (protojson with NRI's proto names: 64-bit integers are strings)."""

    def __init__(
        self,
        node: Node,
        name: str,
        *,
        idx: str = "50",
        fail_update_sandbox: Optional[str] = None,
        update_sandbox_delay_ms: int = 0,
        fail_request: bool = False,
        keep_connected: bool = False,
    ) -> None:
        self.node = node
        self.name = name
        self.out = node.dir / "recorders" / f"{idx}-{name}.jsonl"
        self.argv = [
            str(node.rig.program("nri-recorder")),
            "-socket",
            str(node.nri_socket),
            "-out",
            str(self.out),
            "-name",
            name,
            "-idx",
            idx,
            "-update-sandbox-delay-ms",
            str(update_sandbox_delay_ms),
        ]
        if fail_update_sandbox is not None:
            self.argv += ["-fail-update-sandbox", fail_update_sandbox]
        if fail_request:
            self.argv.append("-fail-request")
        if keep_connected:
            self.argv.append("-keep-connected")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._stderr: Optional[IO[bytes]] = None

    def start(self, timeout: float = 10) -> Recorder:
        """Start it and wait until the runtime has synchronized it (it is registered)."""
        self.out.parent.mkdir(exist_ok=True)
        self.out.unlink(missing_ok=True)
        self._stderr = (self.out.with_suffix(".log")).open("wb")
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr
        )
        self.wait_for("Synchronize", timeout=timeout)
        return self

    def events(self, kind: Optional[str] = None) -> list[dict[str, Any]]:
        """What it has recorded so far (of one kind when ``kind`` is given)."""
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines.pop()  # still being written
        got = [json.loads(line) for line in lines]
        return [e for e in got if kind is None or e["event"] == kind]

    def kinds(self) -> list[str]:
        """The names of the events so far, in order."""
        return [e["event"] for e in self.events()]

    def wait_for(
        self,
        kind: str,
        where: Callable[[dict[str, Any]], bool] = lambda _: True,
        timeout: float = 10,
    ) -> dict[str, Any]:
        """The first ``kind`` event for which ``where`` holds, once it is there."""

        def seen() -> Optional[dict[str, Any]]:
            for event in self.events(kind):
                if where(event):
                    return event
            if self.proc is not None and self.proc.poll() is not None and kind != "Closed":
                raise AssertionError(
                    f"nri-recorder {self.name} exited ({self.proc.returncode}) before "
                    f"{kind}: {self.log()}; events {self.kinds()}"
                )
            return None

        event = wait_until(
            seen, lambda: f"{kind} at recorder {self.name}; events {self.kinds()}", timeout
        )
        assert event is not None  # wait_until returns only a true value
        return event

    def log(self) -> str:
        try:
            return self.out.with_suffix(".log").read_text(errors="replace")[-2000:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


# -- the node --------------------------------------------------------------------------------


def _toml(value: Union[str, bool, int, list[str]]) -> str:
    """A TOML value (JSON's string syntax is TOML's basic string for these values)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


class Node:
    """One containerd with its CRI and NRI, in a directory of its own."""

    def __init__(
        self,
        rig: Rig,
        series: str,
        *,
        request_timeout: float = 2.0,
        log_level: str = "info",
    ) -> None:
        if series not in SERIES:
            raise ValueError(f"series {series!r}: one of {SERIES}")
        self.rig = rig
        self.series = series
        self.version = containerd_version(series)
        self.request_timeout = request_timeout
        self.log_level = log_level
        self.dir = Path("/nonexistent")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.recorders: list[Recorder] = []
        self._log: Optional[IO[bytes]] = None
        self._pod_configs: dict[str, Path] = {}  # pod id -> its config file
        self._ids: set[str] = set()  # pods and containers made here
        self._cgroup_parents: set[str] = set()

    # -- paths -------------------------------------------------------------------------------
    @property
    def bin(self) -> Path:
        return self.rig.containerd_bin(self.series)

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def nri_socket(self) -> Path:
        return self.dir / "run-nri" / "nri.sock"

    @property
    def config_path(self) -> Path:
        return self.dir / "config.toml"

    @property
    def log_path(self) -> Path:
        return self.dir / "containerd.log"

    def config(self) -> str:
        """The containerd configuration (version 4: what v2.3 and v2.4 write and read as
        they are)."""
        d = self.dir
        runc_options = (
            f"BinaryName = {_toml(str(self.rig.runc))}\n"
            f"Root = {_toml(str(d / 'runc'))}\n"
            "SystemdCgroup = false\n"
        )
        runtimes = ""
        kata = 'pod_annotations = ["io.katacontainers.*"]\nprivileged_without_host_devices = true\n'
        for handler, extra in (
            (RUNC_HANDLER, ""),
            (KATA_HANDLER, kata),
            (KATA_GO_HANDLER, kata),
        ):
            table = f"plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'{handler}'"
            runtimes += (
                f"[{table}]\n"
                'runtime_type = "io.containerd.runc.v2"\n'
                'sandboxer = "podsandbox"\n'
                f"{extra}"
                f"[{table}.options]\n{runc_options}\n"
            )
        timeout_ms = round(self.request_timeout * 1000)
        return f"""\
version = 4
root = {_toml(str(d / "root"))}
state = {_toml(str(d / "state"))}
temp = {_toml(str(d / "tmp"))}
imports = []

[debug]
level = {_toml(self.log_level)}

[plugins.'io.containerd.server.v1.grpc']
address = {_toml(str(self.socket))}

[plugins.'io.containerd.server.v1.ttrpc']
address = {_toml(str(self.socket) + ".ttrpc")}

[plugins.'io.containerd.shim.v1.manager']
socket_dir = {_toml(str(d / "s"))}

[plugins.'io.containerd.internal.v1.opt']
path = {_toml(str(d / "opt"))}

[plugins.'io.containerd.image-verifier.v1.bindir']
bin_dir = {_toml(str(d / "image-verifier"))}

[plugins.'io.containerd.nri.v1.nri']
disable = false
socket_path = {_toml(str(self.nri_socket))}
plugin_path = {_toml(str(d / "nri" / "plugins"))}
plugin_config_path = {_toml(str(d / "nri" / "conf.d"))}
plugin_request_timeout = "{timeout_ms}ms"

[plugins.'io.containerd.cri.v1.images']
snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
sandbox = {_toml(PAUSE_IMAGE)}

[plugins.'io.containerd.cri.v1.runtime']
restrict_oom_score_adj = true
cdi_spec_dirs = [{_toml(str(d / "cdi"))}]

[plugins.'io.containerd.cri.v1.runtime'.cni]
bin_dirs = [{_toml(str(d / "cni" / "bin"))}]
conf_dir = {_toml(str(d / "cni" / "net.d"))}

[plugins.'io.containerd.cri.v1.runtime'.containerd]
default_runtime_name = {_toml(RUNC_HANDLER)}

{runtimes}"""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 30) -> Node:
        """Make the directory, start containerd and import the pause image."""
        self.dir = Path(tempfile.mkdtemp(prefix="kmnode-", dir="/tmp"))
        for sub in (
            "root",
            "state",
            "tmp",
            "opt",
            "runc",
            "s",
            "nri/plugins",
            "nri/conf.d",
            "run-nri",
        ):
            (self.dir / sub).mkdir(parents=True)
        for sub in ("cni/bin", "cni/net.d", "cdi", "image-verifier", "pods", "logs", "recorders"):
            (self.dir / sub).mkdir(parents=True)
        self.config_path.write_text(self.config())
        (self.dir / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.socket}\n"
            f"image-endpoint: unix://{self.socket}\n"
            "timeout: 30\npull-image-on-create: false\ndisable-pull-on-run: true\n"
        )
        self._spawn(timeout)
        self.import_image(self.rig.pause_tar, PAUSE_IMAGE, timeout)
        return self

    def import_image(self, tar: Path, ref: str, timeout: float = 30) -> None:
        """``ctr images import`` of an OCI layout tar into the CRI's namespace, and wait
        until the CRI sees ``ref`` (its image store learns of the import from an event,
        after ctr returned). The image stays in the node's directory."""
        self.ctr("images", "import", "--platform", "linux/" + go_arch(), str(tar), timeout=120)
        seen = self.cri_call("image-status", "-image", ref, "-wait", f"{timeout:g}s")
        if not seen.get("found"):
            raise NodeError(f"the CRI never saw {ref} after ctr's import of {tar}: {seen}")

    def _spawn(self, timeout: float) -> None:
        self._log = self.log_path.open("ab")
        env = {
            "PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.dir),
            "TMPDIR": str(self.dir / "tmp"),
        }
        self.proc = subprocess.Popen(
            [str(self.bin / "containerd"), "--config", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
            start_new_session=True,
        )

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise NodeError(f"containerd exited ({self.proc.returncode}):\n{self.log()}")
            if not self.socket.exists():
                return False
            return self._crictl_run("version").returncode == 0

        wait_until(ready, lambda: f"containerd ready on {self.socket}:\n{self.log()}", timeout)

    def restart(self, timeout: float = 30) -> None:
        """Stop containerd (SIGTERM, as a service manager does) and start it again. The
        shims, and so the pods, go on."""
        self._stop_containerd()
        self._spawn(timeout)

    def _stop_containerd(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def processes(self) -> list[psutil.Process]:
        """Every live process this node started: containerd, the shims serving it (their
        command line names its socket) and everything under them, the recorders."""
        found: dict[int, psutil.Process] = {}
        address = str(self.socket)
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if any(a == address for a in cmdline) and "-address" in cmdline:
                found[proc.pid] = proc
                with contextlib.suppress(psutil.Error):
                    for child in proc.children(recursive=True):
                        found[child.pid] = child
        for pid in [self.proc.pid if self.proc else None] + [
            r.proc.pid for r in self.recorders if r.proc is not None
        ]:
            if pid is not None:
                with contextlib.suppress(psutil.Error):
                    found[pid] = psutil.Process(pid)
        return [proc for proc in found.values() if _running(proc)]

    def stop(self) -> None:
        """Kill everything the node started, remove the cgroups made for its pods and the
        mounts under its directory, and the directory. Safe to call twice."""
        for recorder in self.recorders:
            recorder.stop()
        self._stop_containerd()
        procs = self.processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        # Not psutil.wait_procs: the shims' children, orphaned, stay zombies until init
        # reaps them, and a zombie no longer runs.
        deadline = time.monotonic() + 10
        while any(_running(p) for p in procs):
            if time.monotonic() >= deadline:
                raise NodeError(f"still running after SIGKILL: {procs}")
            time.sleep(0.02)
        self._remove_cgroups()
        for point in mounts_under(self.dir):
            done = subprocess.run(["umount", str(point)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(point)], capture_output=True, check=True)
        left = mounts_under(self.dir)
        if left:
            raise NodeError(f"still mounted: {left}")
        if self.dir.name.startswith("kmnode-") and self.dir.is_dir():
            shutil.rmtree(self.dir)

    def _remove_cgroups(self) -> None:
        """The cgroups of this node's pods and containers that runc left (a killed shim
        does not delete them), then every directory a node's runc made for a
        ``cgroup_parent`` (:func:`made_cgroups`) that no cgroup is left in."""
        with made_cgroups() as made:
            for root in cgroup_roots():
                for parent in self._cgroup_parents:
                    for cid in self._ids:
                        leaf = root / parent.lstrip("/") / cid
                        if leaf.is_dir():
                            _rmdir_cgroup(leaf)
            for directory in sorted(made, key=lambda d: d.count("/"), reverse=True):
                path = Path(directory)
                # One with child cgroups holds another node's pods: that node removes it.
                if path.is_dir() and any(p.is_dir() for p in path.iterdir()):
                    continue
                if path.is_dir():
                    _rmdir_cgroup(path)
                made.remove(directory)

    def __enter__(self) -> Node:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *_: object) -> None:
        self.stop()

    def log(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    # -- commands ----------------------------------------------------------------------------
    def _crictl_run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.rig.crictl), "--config", str(self.dir / "crictl.yaml"), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def crictl(self, *args: str, timeout: float = 60) -> str:
        """crictl's output; NodeError when it fails."""
        done = self._crictl_run(*args, timeout=timeout)
        if done.returncode != 0:
            raise NodeError(f"crictl {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def ctr(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            [str(self.bin / "ctr"), "--address", str(self.socket), "-n", K8S_NAMESPACE, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def cri_call(self, *args: str, timeout: float = 60) -> dict[str, Any]:
        """tests/go's cri-call: the JSON line it prints."""
        done = subprocess.run(
            [str(self.rig.program("cri-call")), "-socket", str(self.socket), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise NodeError(f"cri-call {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def start_recorder(self, name: str = "recorder", **options: Any) -> Recorder:
        """An ``nri-recorder`` on this node, registered (options: :class:`Recorder`'s)."""
        recorder = Recorder(self, name, **options)
        self.recorders.append(recorder)
        return recorder.start()

    # -- pods and containers -----------------------------------------------------------------
    def run_pod(
        self,
        name: str,
        handler: str,
        cgroup_parent: str,
        *,
        annotations: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        resources: Optional[Resources] = None,
        overhead: Optional[Resources] = None,
    ) -> str:
        """RunPodSandbox (crictl runp) of a host-network pod; its id. ``cgroup_parent`` is a
        path inside the cgroup hierarchies (:func:`hierarchy_path`), as the kubelet gives
        it with cgroupfs; ``resources`` and ``overhead`` are the LinuxPodSandboxConfig's."""
        linux: dict[str, Any] = {
            "cgroup_parent": cgroup_parent,
            "security_context": {"namespace_options": {"network": 2, "pid": 1}},  # NODE, CONTAINER
        }
        if resources is not None:
            linux["resources"] = dict(resources)
        if overhead is not None:
            linux["overhead"] = dict(overhead)
        uid = str(uuid.uuid4())
        config = {
            "metadata": {"name": name, "namespace": POD_NAMESPACE, "uid": uid, "attempt": 0},
            "log_directory": str(self.dir / "logs" / name),
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {}),
            "linux": linux,
        }
        return self.run_sandbox(config, handler)

    def run_sandbox(self, config: Mapping[str, Any], handler: str = RUNC_HANDLER) -> str:
        """RunPodSandbox (crictl runp) of a PodSandboxConfig as JSON (crictl's snake_case
        names), whose ``linux.cgroup_parent`` is a path inside the cgroup hierarchies; its
        id. The cgroups made for it, and the pod's, are removed when the node stops."""
        meta = config["metadata"]
        path = self.dir / "pods" / f"{meta['name']}-{meta['uid']}.json"
        path.write_text(json.dumps(config, indent=1))
        cgroup_parent = config["linux"]["cgroup_parent"]
        self._cgroup_parents.add(cgroup_parent)
        with made_cgroups() as made:
            # runc makes the directories of cgroup_parent that are missing, in every
            # hierarchy: note them first, for the node that stops last to remove them.
            parts = Path(cgroup_parent.lstrip("/")).parts
            for root in cgroup_roots():
                for depth in range(1, len(parts) + 1):
                    directory = str(root.joinpath(*parts[:depth]))
                    if not Path(directory).exists() and directory not in made:
                        made.append(directory)
            pod = self.crictl("runp", "--runtime", handler, str(path)).strip()
        self._ids.add(pod)
        self._pod_configs[pod] = path
        return pod

    def create_container(
        self, pod: str, name: str, memory_limit: Optional[int] = None, *, start: bool = True
    ) -> str:
        """CreateContainer (crictl create) of the pause image in ``pod``, then
        StartContainer unless ``start`` is false; its id."""
        config: dict[str, Any] = {
            "metadata": {"name": name, "attempt": 0},
            "image": {"image": PAUSE_IMAGE},
            "log_path": f"{name}.log",
            "linux": {
                "resources": resources(memory=memory_limit),
                "security_context": {"namespace_options": {"network": 2, "pid": 1}},
            },
        }
        ctr = self.create(pod, config)
        if start:
            self.crictl("start", ctr)
        return ctr

    def create(self, pod: str, config: Mapping[str, Any]) -> str:
        """CreateContainer (crictl create) of a ContainerConfig as JSON in ``pod`` (one of
        :meth:`run_sandbox`'s); its id."""
        path = self.dir / "pods" / f"{pod[:12]}-{config['metadata']['name']}.json"
        path.write_text(json.dumps(config, indent=1))
        ctr = self.crictl("create", pod, str(path), str(self._pod_configs[pod])).strip()
        self._ids.add(ctr)
        return ctr

    def update_container(
        self,
        ctr: str,
        *,
        memory: Optional[int] = None,
        cpu_quota: Optional[int] = None,
        cpu_period: Optional[int] = None,
        cpu_shares: Optional[int] = None,
    ) -> None:
        """UpdateContainerResources (crictl update)."""
        args = []
        for flag, value in (
            ("--memory", memory),
            ("--cpu-quota", cpu_quota),
            ("--cpu-period", cpu_period),
            ("--cpu-share", cpu_shares),
        ):
            if value is not None:
                args += [flag, str(value)]
        self.crictl("update", *args, ctr)

    def update_sandbox(
        self,
        pod: str,
        *,
        memory: Optional[int] = None,
        overhead: Union[int, Resources, None] = None,
        resources: Optional[Resources] = None,
        timeout: float = 30,
    ) -> CriStatus:
        """UpdatePodSandboxResources (cri-call): the pod's new ``resources`` (or just its
        ``memory`` limit) and ``overhead`` (a LinuxContainerResources, or its memory limit).
        A gRPC error is returned, not raised."""
        new = dict(resources or {})
        if memory is not None:
            new["memory_limit_in_bytes"] = memory
        args = ["update-sandbox", "-pod", pod, "-resources", json.dumps(new)]
        if overhead is not None:
            spent = resources_of(overhead)
            args += ["-overhead", json.dumps(spent)]
        got = self.cri_call("-timeout", f"{timeout:g}s", *args)
        return CriStatus(got["code"], got["message"], float(got["elapsed_ms"]))

    def stop_pod(self, pod: str) -> None:
        self.crictl("stopp", pod)

    def remove_pod(self, pod: str) -> None:
        self.crictl("rmp", pod)
        self._pod_configs.pop(pod, None)

    def pods(self) -> list[dict[str, Any]]:
        """ListPodSandbox (crictl pods): the CRI's PodSandbox items as JSON."""
        items: list[dict[str, Any]] = json.loads(self.crictl("pods", "-o", "json"))["items"]
        return items

    def containers(self, pod: Optional[str] = None) -> list[dict[str, Any]]:
        args = ["ps", "-a", "-o", "json"] + (["--pod", pod] if pod else [])
        items: list[dict[str, Any]] = json.loads(self.crictl(*args))["containers"]
        return items

    def inspect_pod(self, pod: str) -> dict[str, Any]:
        """PodSandboxStatus, verbose (crictl inspectp): ``status`` and ``info``."""
        inspected: dict[str, Any] = json.loads(self.crictl("inspectp", "-o", "json", pod))
        return inspected

    def inspect_container(self, ctr: str) -> dict[str, Any]:
        inspected: dict[str, Any] = json.loads(self.crictl("inspect", "-o", "json", ctr))
        return inspected


def resources_of(value: Union[int, Resources]) -> dict[str, int]:
    """A LinuxContainerResources from a memory limit or from one."""
    return resources(memory=value) if isinstance(value, int) else dict(value)


def _running(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (a zombie no longer does)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _rmdir_cgroup(directory: Path, timeout: float = 5) -> None:
    """rmdir a cgroup (EBUSY while a killed process is still leaving it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


@contextlib.contextmanager
def running_node(rig: Rig, series: str, **options: Any) -> Iterator[Node]:
    """A started :class:`Node`, stopped at the end whatever happens."""
    node = Node(rig, series, **options)
    try:
        yield node.start()
    finally:
        node.stop()
