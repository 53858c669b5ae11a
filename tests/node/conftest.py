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
"""

from __future__ import annotations

import os
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
