"""parse_mountinfo finds the cgroup lines by scanning for " - cgroup" instead of splitting
every line (busy nodes have thousands of mounts): on kernel-shaped text it gives exactly
what splitting every line gives, wherever the cgroup lines are, with or without a final
newline, and with other mounts whose paths or options mention cgroups."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kata_mem.edges.cgroups import Mount, _unescape, parse_mountinfo


def split_every_line(text: str) -> tuple[Mount, ...]:
    """The reference: every line split, as parse_mountinfo did before the scan."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        tail = fields[dash + 1 :]
        if len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            Mount(_unescape(fields[3]), _unescape(fields[4]), tail[0], tuple(tail[2].split(",")))
        )
    return tuple(mounts)


# What the kernel writes: spaces, tabs, newlines and backslashes in paths escaped (\040...).
words = st.text(st.sampled_from("abcgroupmemy-_./:\\040"), min_size=1, max_size=12)
paths = st.lists(words, min_size=0, max_size=3).map(lambda parts: "/" + "/".join(parts))
fstypes = st.sampled_from(["cgroup", "cgroup2", "cgroupfs", "overlay", "tmpfs", "proc", "cgroup2x"])
options = st.lists(
    st.sampled_from(["rw", "memory", "cpu", "nsdelegate", "name=systemd"]), min_size=1, max_size=3
)
optional = st.lists(st.sampled_from(["shared:1", "master:2", "propagate_from:3"]), max_size=2)


@st.composite
def lines(draw: st.DrawFn) -> str:
    fields = [
        str(draw(st.integers(1, 9999))),
        str(draw(st.integers(1, 9999))),
        "0:42",
        draw(paths),
        draw(paths),
        "rw,relatime",
        *draw(optional),
        "-",
        draw(fstypes),
        draw(st.sampled_from(["cgroup", "cgroup2", "overlay", "none"])),
        ",".join(draw(options)),
    ]
    return " ".join(fields)


@given(st.lists(lines(), max_size=30), st.booleans())
def test_the_scan_finds_what_splitting_every_line_finds(
    mounts: list[str], final_newline: bool
) -> None:
    text = "\n".join(mounts) + ("\n" if final_newline and mounts else "")
    assert parse_mountinfo(text) == split_every_line(text)
