"""The records every value is (kata_mem/core/values.py, msgspec's frozen Structs): what the
code relies on of them, and the two fields left out of a value's equality by hand."""

from __future__ import annotations

import pytest

from kata_mem.core.endpoint import Endpoint, VmmIdentity
from kata_mem.core.errors import InputError
from kata_mem.core.model import Origin, Workload
from kata_mem.core.request import HostOverrides, SandboxRequest
from kata_mem.core.units import GiB
from kata_mem.core.values import Frozen, field, fields, replace


class Sample(Frozen):
    number: int
    name: str = "x"
    items: list[int] = field(default_factory=list)


def test_a_record_is_frozen_equal_by_value_and_hashable() -> None:
    one = Sample(1)
    with pytest.raises(AttributeError):
        one.number = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del one.name
    assert one == Sample(1, "x") and hash(Endpoint("qmp", "/s")) == hash(Endpoint("qmp", "/s"))
    assert one != Sample(2) and one != (1, "x", [])  # type: ignore[comparison-overlap]
    assert repr(one) == "Sample(number=1, name='x', items=[])"
    assert fields(Sample) == ("number", "name", "items")


def test_a_default_factory_makes_one_per_instance() -> None:
    first, second = Sample(1), Sample(2)
    first.items.append(3)
    assert second.items == []
    assert (
        SandboxRequest("sb").workload == Workload() and SandboxRequest("sb").host.given() is False
    )


def test_replace_copies_with_changes_and_runs_the_checks() -> None:
    qmp = Endpoint("qmp", "/run/q.sock")
    assert replace(qmp, target="/run/r.sock") == Endpoint("qmp", "/run/r.sock")
    assert qmp.target == "/run/q.sock"
    # __post_init__ runs on a copy too: a remote libvirt URI is refused however it is made.
    with pytest.raises(InputError, match="not a local connection"):
        replace(Endpoint("libvirt", "qemu:///system", "vm"), target="qemu+ssh://host/system")
    with pytest.raises(TypeError, match="no field"):
        replace(qmp, socket="/run/r.sock")


def test_whether_an_endpoint_was_saved_is_not_part_of_its_value() -> None:
    pinned = VmmIdentity(1, 2, 0, 0, 7)
    named = Endpoint("qmp", "/run/q.sock", vmm=pinned)
    read_back = Endpoint("qmp", "/run/q.sock", vmm=pinned, saved=True)
    assert named == read_back and hash(named) == hash(read_back)
    assert named != replace(read_back, vmm=None) and named != replace(named, target="/run/r")
    assert read_back.saved and not named.saved


def test_where_a_cgroup_was_given_is_not_part_of_the_overrides_value() -> None:
    from_request = HostOverrides(memory=GiB, cgroup="/sys/fs/cgroup/x")
    from_option = replace(from_request, cgroup_origin=Origin("option", "--host-cgroup"))
    assert from_request == from_option and hash(from_request) == hash(from_option)
    assert from_request != replace(from_option, cgroup="/sys/fs/cgroup/y")
    assert from_request != replace(from_option, memory=2 * GiB)
    assert from_request != Sample(1)
