"""Which Kata runtime a configuration is for (kata_mem.edges.config ``which_runtime``):
runtime-rs and the Go runtime size a static sandbox differently (runtime-rs
src/runtime-rs/crates/resource/src/cpu_mem/initial_size.rs ``setup_config``; docs,
"Compared with Kata")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.model import Workload
from kata_mem.core.plan import plan
from kata_mem.edges.config import load_config
from kata_mem.interfaces.render import plan_json
from tests.support.configs import HOST, write_config
from tests.support.paths import KATA_CONFIGS

#: Kata's packaged files (tests/fixtures/kata-configs, from kata-containers 7c6ba40c):
#: those of src/runtime-rs/config are runtime-rs's.
PACKAGED = {
    "configuration-qemu.toml": "go",
    "configuration-clh.toml": "go",
    "configuration-fc.toml": "go",
    "configuration-qemu-snp.toml": "go",
    "configuration-stratovirt.toml": "go",
    "configuration-qemu-runtime-rs.toml": "runtime-rs",
    "configuration-clh-runtime-rs.toml": "runtime-rs",
    "configuration-dragonball.toml": "runtime-rs",
    "configuration-rs-fc.toml": "runtime-rs",
}


@pytest.mark.parametrize(("name", "runtime"), sorted(PACKAGED.items()))
def test_each_packaged_file_by_its_keys(tmp_path: Path, name: str, runtime: str) -> None:
    # Under a name that says nothing: the keys alone show it.
    copy = tmp_path / "configuration.toml"
    shutil.copy(KATA_CONFIGS / name, copy)
    cfg = load_config(copy)
    assert cfg.runtime == runtime
    assert cfg.origin("runtime").note.startswith("inferred: ")


def test_a_file_in_runtime_rs_directory(tmp_path: Path) -> None:
    # kata-deploy's per-shim copy: .../kata-containers/runtime-rs/runtimes/SHIM/
    folder = tmp_path / "kata-containers" / "runtime-rs" / "runtimes" / "qemu-runtime-rs"
    folder.mkdir(parents=True)
    cfg = load_config(write_config(folder / "configuration.toml"))
    assert cfg.runtime == "runtime-rs"
    assert "is one of runtime-rs's configuration files" in cfg.origin("runtime").note


def test_a_link_to_runtime_rs_file(tmp_path: Path) -> None:
    # /etc/kata-containers/configuration.toml is often a link to a packaged file.
    target = write_config(tmp_path / "configuration-qemu-runtime-rs.toml")
    link = tmp_path / "etc" / "configuration.toml"
    link.parent.mkdir()
    link.symlink_to(target)
    assert load_config(link).runtime == "runtime-rs"


def test_nothing_of_runtime_rs_is_the_go_runtime(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "configuration.toml"))
    assert cfg.runtime == "go"
    assert '[kata_mem] runtime = "runtime-rs"' in cfg.origin("runtime").note


@pytest.mark.parametrize("runtime", ["go", "runtime-rs"])
def test_the_setting_wins(tmp_path: Path, runtime: str) -> None:
    rs_named = tmp_path / "configuration-qemu-runtime-rs.toml"
    cfg = load_config(
        write_config(rs_named, runtime={"name": "virt_container"}, kata_mem={"runtime": runtime})
    )
    assert cfg.runtime == runtime
    assert cfg.origin("runtime").kind == "file"


def test_an_unknown_runtime_is_a_configuration_error(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", kata_mem={"runtime": "rust"})
    with pytest.raises(ConfigError, match=r'\[kata_mem\] runtime: .*expected "go" or "runtime-rs"'):
        load_config(path)


@pytest.mark.parametrize(
    ("name", "runtime", "static"),
    [
        ("configuration-qemu.toml", "go", False),
        ("configuration-qemu-runtime-rs.toml", "runtime-rs", True),
    ],
)
def test_the_plan_names_the_runtime_and_static_sizing(
    name: str, runtime: str, static: bool
) -> None:
    """The plan's ``config`` says which runtime's rules apply and whether Kata sizes the VM
    only at boot: the NRI plugin (go/client ``PlanConfig``) reads the two names to learn
    whether container events are kata-mem's."""
    cfg = load_config(KATA_CONFIGS / name)
    config = plan_json(plan(cfg, HOST, Workload()), cfg)["config"]
    assert config == {
        "path": str(KATA_CONFIGS / name),
        "hypervisor": "qemu",
        "runtime": runtime,
        "static_sandbox_resource_mgmt": static,
    }
