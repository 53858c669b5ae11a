"""The guest kernel's command line (Kata's ``kernel_params``) read as the kernel reads it
(kata_mem/core/guestmem.py ``parse_kernel_params``, ``guest_policy``): lib/cmdline.c
``next_arg`` splits the words and strips the quotes, kernel/params.c ``parse_args`` stops
at a bare ``--`` (the rest is init's), ``parameq``/``parameqn`` take ``-`` for ``_`` in a
name, and each occurrence is handed to the parameter's setter in turn, so the last one
the setter takes wins. Each expectation was traced through those functions by hand."""

from __future__ import annotations

from typing import Optional

import pytest

from kata_mem.core.guestmem import KernelParam, guest_policy, kstrtouint, parse_kernel_params
from kata_mem.core.model import Onlining, Settings


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("a b=c", [("a", None), ("b", "c")]),
        # Tabs and newlines separate words as spaces do (isspace), and runs of them count once.
        ("  a\t\tb=c\n ", [("a", None), ("b", "c")]),
        # A quoted value loses its quotes, and may hold spaces.
        ('a="b c" d', [("a", "b c"), ("d", None)]),
        # Quotes around the whole word: the opening and the closing one go.
        ('"a=b c" d', [("a", "b c"), ("d", None)]),
        ('"a"', [("a", None)]),
        # The value is what follows the first "=", the rest of the word included.
        ("a=b=c", [("a", "b=c")]),
        # An "=" that starts the word does not count (next_arg: equals == 0).
        ("=a=b", [("=a", "b")]),
        # "name=" is an empty value, a lone quote too; a bare name has none.
        ('a= b="', [("a", ""), ("b", "")]),
        # A quote inside the value only turns quoting on and off; it stays.
        ('a=x"y z"', [("a", 'x"y z"')]),
        # An unclosed quote runs to the end of the line.
        ('a="b c', [("a", "b c")]),
        # A bare "--" ends the kernel's own parameters: what follows is init's.
        ("a=1 -- b=2", [("a", "1")]),
        ('a=1 "--" b=2', [("a", "1")]),
        # "--" with a value is an ordinary parameter.
        ("--=x b", [("--", "x"), ("b", None)]),
    ],
)
def test_words_split_as_next_arg_splits_them(
    line: str, want: list[tuple[str, Optional[str]]]
) -> None:
    assert [(p.name, p.value) for p in parse_kernel_params(line)] == want


def test_each_parameter_keeps_the_word_as_given() -> None:
    assert parse_kernel_params('x "memhp-default-state=online" y') == (
        KernelParam("x", None, "x"),
        KernelParam("memhp-default-state", "online", '"memhp-default-state=online"'),
        KernelParam("y", None, "y"),
    )


@pytest.mark.parametrize(
    ("value", "want"),
    [("0", 0), ("301", 301), ("+5", 5), ("0x10", 16), ("010", 8), ("7\n", 7)]
    + [(v, None) for v in (None, "", "-1", "1.5", "abc", "0x", "09", str(2**32))],
)
def test_a_uint_parameter_reads_as_kstrtouint(value: Optional[str], want: Optional[int]) -> None:
    assert kstrtouint(value) == want


def _onlining(params: str, setting: Onlining) -> tuple[Onlining, str]:
    policy = guest_policy(params, Settings(guest_onlining=setting), "pc-dimm")
    return policy.onlining, policy.onlining_from


@pytest.mark.parametrize(
    ("params", "setting", "want"),
    [
        # Dashes and underscores are one in a name, and the origin names it as written.
        (
            "memhp-default-state=online_movable",
            "kernel",
            ("movable", "kernel_params memhp-default-state=online_movable"),
        ),
        (
            "memhp_default-state=online_kernel",
            "movable",
            ("kernel", "kernel_params memhp_default-state=online_kernel"),
        ),
        # A quoted value, and quotes around the whole word.
        (
            'memhp_default_state="online_kernel"',
            "movable",
            ("kernel", 'kernel_params memhp_default_state="online_kernel"'),
        ),
        (
            '"memhp_default_state=online_movable"',
            "kernel",
            ("movable", 'kernel_params "memhp_default_state=online_movable"'),
        ),
        # The last occurrence wins ...
        (
            "memhp_default_state=online_movable memhp_default_state=online_kernel",
            "movable",
            ("kernel", "kernel_params memhp_default_state=online_kernel"),
        ),
        # ... of those the kernel takes: setup_memhp_default_state ignores a state that
        # mhp_online_type_from_str does not know, and a bare name is no "name=".
        (
            "memhp_default_state=online_kernel memhp_default_state=bogus memhp_default_state",
            "movable",
            ("kernel", "kernel_params memhp_default_state=online_kernel"),
        ),
        # After "--" a word is init's, not the kernel's.
        (
            "memhp_default_state=online_kernel -- memhp_default_state=online_movable",
            "movable",
            ("kernel", "kernel_params memhp_default_state=online_kernel"),
        ),
        (
            "-- memhp_default_state=online_movable",
            "kernel",
            ("kernel", "[kata_mem] guest_onlining = kernel"),
        ),
        # memory_hotplug.online_policy, spelled every way.
        (
            "memory-hotplug.online-policy=auto-movable",
            "kernel",
            ("movable", "kernel_params memory-hotplug.online-policy=auto-movable"),
        ),
        (
            'memory_hotplug.online_policy="auto-movable"',
            "kernel",
            ("movable", 'kernel_params memory_hotplug.online_policy="auto-movable"'),
        ),
        (
            "memory_hotplug.online_policy=auto-movable memory_hotplug.online_policy=bogus",
            "kernel",
            ("movable", "kernel_params memory_hotplug.online_policy=auto-movable"),
        ),
        (
            "memory_hotplug.online_policy=auto-movable memory_hotplug.online_policy=contig-zones",
            "kernel",
            ("kernel", "[kata_mem] guest_onlining = kernel"),
        ),
        # memory_hotplug.auto_movable_ratio 0: nothing fits the ratio, every block is
        # onlined to a kernel zone (auto_movable_can_online_movable); spelled every way.
        (
            "memory_hotplug.online_policy=auto-movable memory-hotplug.auto-movable-ratio=0",
            "movable",
            (
                "kernel",
                "kernel_params memory_hotplug.online_policy=auto-movable "
                "memory-hotplug.auto-movable-ratio=0",
            ),
        ),
        (
            'memory_hotplug.online_policy=auto-movable "memory_hotplug.auto_movable_ratio=0x0"',
            "movable",
            (
                "kernel",
                "kernel_params memory_hotplug.online_policy=auto-movable "
                '"memory_hotplug.auto_movable_ratio=0x0"',
            ),
        ),
        # A ratio the kernel refuses leaves the last one it took (or its 301).
        (
            "memory_hotplug.online_policy=auto-movable memory_hotplug.auto_movable_ratio=0 "
            "memory_hotplug.auto_movable_ratio=many",
            "movable",
            (
                "kernel",
                "kernel_params memory_hotplug.online_policy=auto-movable "
                "memory_hotplug.auto_movable_ratio=0",
            ),
        ),
        (
            "memory_hotplug.online_policy=auto-movable memory_hotplug.auto_movable_ratio=0 "
            "memory_hotplug.auto_movable_ratio=50",
            "kernel",
            ("movable", "kernel_params memory_hotplug.online_policy=auto-movable"),
        ),
        # The ratio means nothing without the auto-movable policy.
        (
            "memory_hotplug.auto_movable_ratio=0",
            "movable",
            ("movable", "[kata_mem] guest_onlining = movable"),
        ),
        # movable_node (an early_param: do_early_param compares the name alone).
        ("movable-node", "kernel", ("movable", "kernel_params movable-node")),
    ],
)
def test_the_onlining_is_read_as_the_kernel_reads_its_parameters(
    params: str, setting: Onlining, want: tuple[Onlining, str]
) -> None:
    assert _onlining(params, setting) == want


@pytest.mark.parametrize(
    ("params", "given"),
    [
        ("memory-hotplug.memmap-on-memory=1", "memory-hotplug.memmap-on-memory=1"),
        ('"memory_hotplug.memmap_on_memory=force"', '"memory_hotplug.memmap_on_memory=force"'),
        # A bool module parameter without a value is set (param_set_bool).
        ("memory_hotplug.memmap_on_memory", "memory_hotplug.memmap_on_memory"),
        (
            "memory_hotplug.memmap_on_memory=0 memory_hotplug.memmap_on_memory=y",
            "memory_hotplug.memmap_on_memory=y",
        ),
        # A value the kernel refuses (kstrtobool) leaves the one before.
        (
            "memory_hotplug.memmap_on_memory=on memory_hotplug.memmap_on_memory=maybe",
            "memory_hotplug.memmap_on_memory=on",
        ),
    ],
)
def test_memmap_on_memory_is_read_as_the_kernel_reads_it(params: str, given: str) -> None:
    policy = guest_policy(params, Settings(), "pc-dimm")
    assert not policy.memmap_on_memory
    assert policy.memmap_from.startswith(f"not counted: kernel_params {given}, "), policy


@pytest.mark.parametrize(
    "params",
    [
        "memory_hotplug.memmap_on_memory=1 memory_hotplug.memmap_on_memory=0",
        "-- memory_hotplug.memmap_on_memory=1",
        "memory_hotplug.memmap_on_memory=",
    ],
)
def test_memmap_on_memory_off_as_the_kernel_reads_it(params: str) -> None:
    assert guest_policy(params, Settings(), "pc-dimm").memmap_from == "off"
