"""A real host memory cgroup for a test guest's QEMU: a child of this process's own
memory cgroup (cgroup v1 ``memory`` hierarchy, or v2 when memory is delegated to
our cgroup's children), created for one test and removed after it.

QEMU is started inside it (:class:`CgroupGuestVM`: a shell writes its own pid to
``cgroup.procs`` and execs QEMU, so the pid is QEMU's), before QEMU or the guest
touches any memory: everything QEMU uses is charged there, as a Kata sandbox's is
to its pod cgroup with ``sandbox_cgroup_only``. This harness reads /proc and the
cgroup files itself, independently of ``kata_mem.edges.cgroups``, so that it can catch
that module being wrong.

    with MemoryCgroup.create("kmtest") as cg:   # pytest.skip with the reason if impossible
        cg.set_limit(900 * MiB)
        vm = CgroupGuestVM(guest_dir, workdir, spec, cgroup=cg).start()
        ... cg.usage(), cg.oom_kills()
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from tests.support.guestvm import GuestSpec, GuestVM

if TYPE_CHECKING:
    from types import TracebackType

MiB = 1 << 20


class CgroupUnavailable(Exception):
    """No memory cgroup can be made here; the message says why (tests skip with it)."""


def _own_memory_cgroup() -> tuple[int, Path]:
    """(version, directory) of this process's memory cgroup, or CgroupUnavailable."""
    v1_path = v2_path = None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1_path = path
        elif hier == "0" and controllers == "":
            v2_path = path
    v1_mount = v2_mount = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        tail = fields[fields.index("-", 6) + 1 :]
        root, point = fields[3], fields[4]
        if tail[0] == "cgroup" and "memory" in tail[2].split(",") and root == "/":
            v1_mount = Path(point)
        elif tail[0] == "cgroup2" and root == "/":
            listed = Path(point, "cgroup.controllers")
            if listed.is_file() and "memory" in listed.read_text().split():
                v2_mount = Path(point)
    if v1_path is not None:
        if v1_mount is None:
            raise CgroupUnavailable(
                f"in v1 memory cgroup {v1_path}, but its hierarchy is not mounted here"
            )
        return 1, v1_mount / v1_path.lstrip("/")
    if v2_path is not None and v2_mount is not None:
        return 2, v2_mount / v2_path.lstrip("/")
    raise CgroupUnavailable(
        "no cgroup v1 memory hierarchy and no cgroup2 mount with the memory controller"
    )


class MemoryCgroup:
    """One child memory cgroup; :meth:`remove` (or the context manager) kills the
    processes this test put in it and removes it."""

    def __init__(self, version: int, path: Path) -> None:
        self.version = version
        self.path = path
        self.pids: list[int] = []  # what this test put in it (to stop at removal)

    @classmethod
    def create(cls, name: str) -> MemoryCgroup:
        """:raises CgroupUnavailable: with the reason (not root, not delegated, ...)."""
        version, parent = _own_memory_cgroup()
        if version == 2:
            subtree = (parent / "cgroup.subtree_control").read_text().split()
            if "memory" not in subtree:
                raise CgroupUnavailable(
                    f"cgroup v2: memory is not enabled for the children of {parent} "
                    "(cgroup.subtree_control); delegate it to run these tests"
                )
        path = parent / f"{name}-{os.getpid()}-{time.monotonic_ns()}"
        try:
            path.mkdir()
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create a memory cgroup under {parent}: {exc}") from exc
        return cls(version, path)

    # -- files -----------------------------------------------------------------------
    def _file(self, v1: str, v2: str) -> Path:
        return self.path / (v1 if self.version == 1 else v2)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def set_limit(self, limit: int) -> None:
        self._file("memory.limit_in_bytes", "memory.max").write_text(str(limit))

    def limit(self) -> int:
        return int(self._file("memory.limit_in_bytes", "memory.max").read_text().strip())

    def usage(self) -> int:
        """What is charged now (v1 ``memory.usage_in_bytes``, v2 ``memory.current``)."""
        return int(self._file("memory.usage_in_bytes", "memory.current").read_text())

    def oom_kills(self) -> int:
        """Processes the kernel killed for this cgroup's limit (``oom_kill`` in v1
        ``memory.oom_control`` / v2 ``memory.events``)."""
        text = self._file("memory.oom_control", "memory.events").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        raise AssertionError(f"no oom_kill line in {self.path}: {text!r}")

    def members(self) -> list[int]:
        return [int(p) for p in self.procs_file.read_text().split()]

    def holds(self, pid: int) -> bool:
        """Whether /proc says ``pid`` is in this cgroup (its name is unique)."""
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            hier, controllers, path = line.split(":", 2)
            if ("memory" in controllers.split(",")) if self.version == 1 else hier == "0":
                return path.rstrip("/").endswith("/" + self.path.name)
        return False

    # -- lifecycle -------------------------------------------------------------------
    def remove(self) -> None:
        """Kill what this test put here and is still here, then remove the cgroup."""
        for pid in self.pids:
            if pid in self.members():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                # Busy while a killed process is still exiting.
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.remove()


class CgroupGuestVM(GuestVM):
    """The test guest with QEMU started inside ``cgroup``: ``sh`` moves itself there
    and execs QEMU (same pid), so not a page of QEMU is charged elsewhere."""

    def __init__(
        self, guest_dir: Path, workdir: Path, spec: GuestSpec, *, cgroup: MemoryCgroup
    ) -> None:
        super().__init__(guest_dir, workdir, spec)
        self.cgroup = cgroup

    def qemu_argv(self) -> list[str]:
        enter = 'echo $$ > "$0" && exec "$@"'
        return ["sh", "-c", enter, str(self.cgroup.procs_file), *super().qemu_argv()]

    def start(self, timeout: float = 90.0) -> CgroupGuestVM:
        super().start(timeout)
        self.cgroup.pids.append(self.pid)
        if not self.cgroup.holds(self.pid):
            self.stop()
            raise AssertionError(f"QEMU (pid {self.pid}) is not in {self.cgroup.path}")
        return self
