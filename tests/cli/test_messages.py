"""Messages that say what happened, in the user's terms: the
rounded MiB a plan shows, the form of an error, the values an option takes, and why a
node's budget is 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import Run
from tests.support.configs import write_config
from tests.support.paths import KATA_CONFIGS

QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")


def test_a_clamp_says_the_requested_mib_the_table_and_the_json_show(run_cli: Run) -> None:
    # 2048 MiB and a byte: 2049 in the table and requested_mib, and so in the clamp's text.
    args = ("preview", "--config", QEMU, "--limit", "1", "--host-memory", "2048Mi")
    text = run_cli(*args, "--host-cpus", "2").out
    assert "requested                     2049" in text
    assert "why: host_memtotal: requested 2049 MiB clamped to 2048 MiB by the host's" in text
    doc = json.loads(run_cli(*args, "--host-cpus", "2", "--json").out)
    memory = doc["memory"]
    assert memory["requested_mib"] == 2049
    assert memory["clamps"][0]["detail"].startswith("requested 2049 MiB clamped to 2048 MiB")
    assert not any("2048.01" in w for w in doc["warnings"]), doc["warnings"]


def test_a_file_named_json_asks_for_no_json(run_cli: Run, tmp_path: Path) -> None:
    # click gives --pod the value "--json": a file name, so the error is text. The
    # workload is read before the configuration, by preview as by apply (one request).
    r = run_cli("preview", "--config", str(tmp_path / "none.toml"), "--pod", "--json")
    assert r.code == 4
    assert r.out == "" and r.err == "kata-mem: error: --json: no such Pod manifest file\n"


def test_json_asked_for_is_the_error_document_even_for_an_option_before_it(
    run_cli: Run,
) -> None:
    # --json is read before every other option's value is checked.
    r = run_cli("preview", "--config", QEMU, "--host-cpus", "2", "--limit", "1Q", "--json")
    assert r.code == 4
    assert json.loads(r.out)["error"]["message"].startswith("--limit '1Q': invalid quantity")
    r = run_cli("config", "check", "/nonexistent.toml", "--json")
    assert (r.code, json.loads(r.out)["error"]["exit_code"]) == (3, 3)


@pytest.mark.parametrize("value", ["\uff12", "1_0", " 2", "0", "-1", "9223372036854775808"])
def test_host_cpus_takes_ascii_digits_in_range(run_cli: Run, value: str) -> None:
    r = run_cli("preview", "--config", QEMU, "--host-cpus", value)
    assert r.code == 2
    assert f"'{value}': expected an integer from 1 to 9223372036854775807" in r.err


@pytest.mark.parametrize("value", ["nan", "inf", "\uff15", "0.05", "3601"])
def test_serve_seconds_are_numbers_in_range(run_cli: Run, value: str, tmp_path: Path) -> None:
    r = run_cli("serve", "--socket", str(tmp_path / "s.sock"), "--idle-timeout", value)
    assert r.code == 2
    assert f"'{value}': expected a number of seconds from 0.1 to 3600" in r.err
    assert not (tmp_path / "s.sock").exists()


def test_a_budget_of_0_says_why_in_status_all_and_config_check(
    run_cli: Run, tmp_path: Path
) -> None:
    cfg = write_config(
        tmp_path / "c.toml",
        kata_mem={
            "state_dir": str(tmp_path / "state"),
            "node_reserved_mib": 1 << 40,  # above any host
            "node_overcommit": 1.0,
        },
    )
    why = "is not below the host's memory (16384 MiB): the node budget is 0, so no sandbox"
    r = run_cli("status", "--all", "--config", str(cfg), "--host-memory", "16Gi")
    assert r.code == 0 and "budget 0 MiB" in r.out
    assert why in r.err
    r = run_cli("config", "check", str(cfg))
    assert r.code == 0
    assert "the node budget is 0, so no sandbox can grow; lower node_reserved_mib" in r.err
    # Without node_overcommit there is no budget to be 0: nothing to say.
    write_config(cfg, kata_mem={"node_reserved_mib": 1 << 40})
    assert "budget" not in run_cli("config", "check", str(cfg)).err
