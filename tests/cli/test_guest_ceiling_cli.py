"""The guest's own ceiling on the command line: the 1000Gi pod that started the
project previews, on a 1 TiB host with Kata's 2048 MiB boot memory, a target the boot
memory can describe, with the arithmetic; ``config check`` warns when the maximum
promises more than ``default_memory`` can describe."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import CliResult
from tests.support.configs import write_config
from tests.support.paths import KATA_CONFIGS, PODS

UPSTREAM_QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")

Run = Callable[..., CliResult]
BOOM = str(PODS / "memory-boom.yaml")
TIB = ("--host-memory", "1Ti", "--host-cpus", "64", "--host-arch", "amd64")


def test_the_1000gi_pod_on_a_1tib_host_previews_what_the_guest_can_describe(
    run_cli: Run, tmp_path: Path
) -> None:
    """Kata's own configuration: its guest onlines to a kernel zone, so the grow is staged,
    each DIMM within what the guest can describe then. Onlined movable (a drop-in as an
    operator would add it), the boot memory pays for every struct page, and the grow stops
    where it can."""
    r = run_cli("preview", "--config", UPSTREAM_QEMU, "--pod", BOOM, *TIB, "--json")
    assert r.code == 0, r.err
    m = json.loads(r.out)["memory"]
    assert (m["requested_mib"], m["target_mib"], m["clamped_by"]) == (1026048, 1026048, [])
    assert [s["size_mib"] for s in m["steps"]] == [85120, 938880]
    assert (m["guest"]["onlining"], m["guest"]["limit_mib"], m["guest"]["staged"]) == (
        "kernel",
        87232,
        True,
    )
    assert m["guest"]["onlining_from"].startswith("as Kata's guest onlines it"), m["guest"]

    movable = tmp_path / "configuration.toml"
    movable.write_bytes(Path(UPSTREAM_QEMU).read_bytes())
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-movable.toml").write_text(
        '[hypervisor.qemu]\nkernel_params = "memhp_default_state=online_movable"\n'
    )
    r = run_cli("preview", "--config", str(movable), "--pod", BOOM, *TIB, "--json")
    m = json.loads(r.out)["memory"]
    # 3/4 x 2048 - headroom 205 = 1331 MiB of 64-byte struct pages describe 1331 x 64 MiB
    # more: 2048 + 85184 = 87232, whole 128 MiB DIMMs below it: 87168 (not 1,026,048).
    assert (m["requested_mib"], m["target_mib"]) == (1026048, 87168)
    assert m["clamped_by"][0] == "guest_memmap"
    assert (m["guest"]["room_mib"], m["guest"]["limit_mib"]) == (1331, 87232)
    text = run_cli("preview", "--config", str(movable), "--pod", BOOM, *TIB).out
    assert "why: guest_memmap: grow to" in text
    assert "1331 MiB of struct pages (64 B per 4 KiB page) describe 85184 MiB more" in text
    assert "(onlining movable: kernel_params memhp_default_state=online_movable)" in text


def test_config_check_warns_when_the_maximum_is_beyond_the_boot_memory(
    run_cli: Run, tmp_path: Path
) -> None:
    # 256 MiB describe at most 256 + (192 - 128) x 64 = 4352 MiB; the maximum is 6144 MiB,
    # or the host's memory where that is less (config check reads this host).
    movable = "memhp_default_state=online_movable"
    cfg = write_config(
        tmp_path / "c.toml",
        {"default_memory": 256, "default_maxmemory": 6144, "kernel_params": movable},
    )
    r = run_cli("config", "check", str(cfg))
    assert r.code == 0
    assert "is more than default_memory 256 MiB can describe" in r.err
    assert "at most 4352 MiB" in r.err
    # Onlined to a kernel zone (what Kata's guest does unless kernel_params says otherwise),
    # the grow is staged: nothing to warn about.
    write_config(cfg, {"default_memory": 256, "default_maxmemory": 6144})
    assert "can describe" not in run_cli("config", "check", str(cfg)).err
    write_config(
        cfg,
        {
            "default_memory": 256,
            "default_maxmemory": 6144,
            "kernel_params": "memhp_default_state=online_kernel",
        },
    )
    assert "can describe" not in run_cli("config", "check", str(cfg)).err


def test_the_preview_names_the_kernel_parameter_as_written(run_cli: Run, tmp_path: Path) -> None:
    """The guest kernel takes memhp-default-state="online_movable" as memhp_default_state
    (kernel/params.c parameqn, lib/cmdline.c next_arg): movable, and the preview names the
    word as it was written, so that it can be found in the configuration."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(  # a TOML literal string: the double quotes are the kernel's
        "[hypervisor.qemu]\ndefault_memory = 512\n"
        "kernel_params = 'quiet memhp-default-state=\"online_movable\"'\n"
    )
    text = run_cli("preview", "--config", str(cfg), "--limit", "40Gi", *TIB).out
    assert '(onlining movable: kernel_params memhp-default-state="online_movable")' in text, text
    assert "why: guest_memmap: grow to" in text
