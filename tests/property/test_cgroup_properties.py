"""The cgroup parsers: limits in both versions read back exactly, the memory line is found
among any others, and no text makes the /proc or mountinfo parsers raise."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kata_mem.edges.cgroups import V1_UNLIMITED, parse_limit, parse_mountinfo, read_proc_cgroup

#: Characters a cgroup path may hold that do not end a line (str.splitlines' boundaries
#: are control or line/paragraph separator characters).
path_chars = st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"))
paths = st.text(path_chars, max_size=40).map(lambda s: "/" + s)
#: Controllers of other v1 hierarchies ("name=memory" is a named hierarchy, not memory).
others = st.sampled_from(
    [
        "cpu",
        "cpuacct",
        "cpuset",
        "blkio",
        "pids",
        "devices",
        "freezer",
        "hugetlb",
        "net_cls",
        "rdma",
        "misc",
        "perf_event",
        "name=systemd",
        "name=memory",
        "memory_x",
    ]
)
spaces = st.sampled_from(["", "\n", " \n", "\t"])


@given(st.integers(min_value=0, max_value=2**64), spaces)
def test_v2_digits_round_trip(n: int, end: str) -> None:
    assert parse_limit(f"{n}{end}", 2) == n


@given(st.integers(min_value=0, max_value=V1_UNLIMITED - 1), spaces)
def test_v1_digits_below_the_sentinel_round_trip(n: int, end: str) -> None:
    assert parse_limit(f"{n}{end}", 1) == n


@given(st.integers(min_value=V1_UNLIMITED, max_value=2**64), spaces)
def test_v1_from_the_sentinel_up_is_no_limit(n: int, end: str) -> None:
    assert parse_limit(f"{n}{end}", 1) is None


@given(st.sampled_from([12, 14, 16, 18]))
def test_v1_page_counter_max_of_every_page_size_is_no_limit(shift: int) -> None:
    page = 1 << shift
    assert parse_limit(f"{(2**63 - 1) // page * page}\n", 1) is None


@given(spaces)
def test_max_is_no_limit_in_v2_only(end: str) -> None:
    assert parse_limit(f"max{end}", 2) is None
    with pytest.raises(ValueError, match="'max"):
        parse_limit(f"max{end}", 1)


@given(st.text(max_size=30), st.sampled_from([1, 2]))
def test_anything_else_is_a_value_error_naming_the_text(raw: str, version: int) -> None:
    text = raw.strip()
    assume(not (text.isascii() and text.isdigit()) and text != "max")
    with pytest.raises(ValueError, match="expected") as caught:
        parse_limit(raw, version)
    assert repr(raw[:40]) in str(caught.value)


@st.composite
def proc_cgroup(draw: st.DrawFn) -> tuple[str, str, str]:
    """A /proc/PID/cgroup text of other hierarchies with one memory line and one v2 line
    somewhere among them: (text, memory path, v2 path)."""
    lines = [
        f"{draw(st.integers(1, 20))}:{','.join(draw(st.lists(others, min_size=1, max_size=3)))}:"
        f"{draw(paths)}"
        for _ in range(draw(st.integers(0, 8)))
    ]
    memory, v2 = draw(paths), draw(paths)
    controllers = draw(st.permutations(["memory", *draw(st.lists(others, max_size=2))]))
    lines.insert(
        draw(st.integers(0, len(lines))),
        f"{draw(st.integers(1, 20))}:{','.join(controllers)}:{memory}",
    )
    lines.insert(draw(st.integers(0, len(lines))), f"0::{v2}")
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"])), memory, v2


@given(proc_cgroup())
def test_the_memory_line_is_found_among_any_others(case: tuple[str, str, str]) -> None:
    text, memory, v2 = case
    assert read_proc_cgroup(text) == (memory, v2)


@given(st.lists(st.tuples(st.integers(1, 20), st.lists(others, min_size=1), paths), max_size=8))
def test_no_memory_line_is_none(lines: list[tuple[int, list[str], str]]) -> None:
    text = "\n".join(f"{n}:{','.join(ctrl)}:{p}" for n, ctrl, p in lines)
    assert read_proc_cgroup(text) == (None, None)


@given(st.text())
def test_any_text_gives_paths_or_none(text: str) -> None:
    for found in read_proc_cgroup(text):
        assert found is None or (found.startswith("/") and found in text)


@given(st.text())
def test_any_mountinfo_text_parses_without_raising(text: str) -> None:
    for mount in parse_mountinfo(text):
        assert mount.fstype in ("cgroup", "cgroup2")
