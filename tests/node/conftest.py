"""Fixtures for the tests on a real node runtime (tests/support/node.py).

* ``rig`` (session): every binary built, or found built, by ``scripts/build-node-rig.sh``
  into ``$KATA_MEM_RIG_DIR`` (default ``<repo>/.cache/rig``), and the pause image's tar.
  Skips only when the machine cannot run a node at all (not Linux, not root, no overlay
  filesystem); a failed build, or runc missing, is a failure.
* ``series`` (function, parametrized): ``"v2.3"`` and ``"v2.4"``, shown as the containerd
  version each pins.
* ``pod_cgroup`` (function): a memory cgroup made for the test (tests/support/memcg.py), to
  be a pod's ``cgroup_parent`` (``hierarchy_path(pod_cgroup.path)``); removed after the
  node is stopped.
* ``node`` (function): a started :class:`Node` of ``series``, stopped at the end.
* ``kata_mem_image`` (session): kata-mem's image built, or found built, by
  ``scripts/build_image.py`` into ``$KATA_MEM_IMAGE_DIR`` (default ``<repo>/.cache/image``):
  the path of its OCI layout tar. A failed build is a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.memcg import CgroupUnavailable, MemoryCgroup
from tests.support.node import (
    DEFAULT_RIG_DIR,
    SERIES,
    Node,
    NodeError,
    Rig,
    RigUnavailable,
    build_rig,
    containerd_version,
    running_node,
)
from tests.support.paths import REPO

#: The image's builder (the node runtime's is scripts/build-node-rig.sh, run by ``rig``).
IMAGE_BUILD = REPO / "scripts" / "build_image.py"


@pytest.fixture(scope="session")
def rig() -> Rig:
    out = Path(os.environ.get("KATA_MEM_RIG_DIR") or DEFAULT_RIG_DIR)
    try:
        return build_rig(out)
    except RigUnavailable as exc:
        pytest.skip(str(exc))
    except NodeError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(params=SERIES, ids=[containerd_version(s) for s in SERIES])
def series(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def pod_cgroup() -> Iterator[MemoryCgroup]:
    try:
        cgroup = MemoryCgroup.create("kmnode")
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    with cgroup:
        yield cgroup


@pytest.fixture
def node(rig: Rig, series: str, pod_cgroup: MemoryCgroup) -> Iterator[Node]:
    # pod_cgroup first: it is removed after the node, whose pods' cgroups are in it.
    with running_node(rig, series) as started:
        yield started


@pytest.fixture(scope="session")
def kata_mem_image(rig: Rig) -> Path:
    # After the rig: a machine that cannot run a node skips before anything is built.
    out = Path(os.environ.get("KATA_MEM_IMAGE_DIR") or REPO / ".cache" / "image")
    done = subprocess.run(
        [sys.executable, str(IMAGE_BUILD), str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"{IMAGE_BUILD.relative_to(REPO)} {out} failed (exit {done.returncode}):\n"
            f"{done.stderr[-4000:]}",
            pytrace=False,
        )
    return Path(done.stdout.strip())
