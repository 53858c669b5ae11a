"""The Kata configuration reader: upstream files unchanged, drop-ins, fallbacks, errors."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.units import MiB
from kata_mem.edges.config import dropin_dir, find_config, load_config, unread_dropins
from tests.support.cli import CliResult
from tests.support.configs import write_config
from tests.support.paths import KATA_CONFIGS, REPO

UPSTREAM = sorted(KATA_CONFIGS.glob("*.toml"))

# (file, hypervisor, static, virtio-mem, default_maxmemory MiB): as rendered upstream.
EXPECTED = {
    "configuration-qemu.toml": ("qemu", False, False, 0),
    "configuration-clh.toml": ("clh", False, False, 0),
    "configuration-fc.toml": ("firecracker", True, False, 0),
    "configuration-qemu-snp.toml": ("qemu", True, False, 0),
    "configuration-stratovirt.toml": ("stratovirt", True, False, 0),
    "configuration-qemu-runtime-rs.toml": ("qemu", True, False, 0),
    "configuration-dragonball.toml": ("dragonball", True, False, 0),
    "configuration-clh-runtime-rs.toml": ("clh", True, False, 0),
    "configuration-rs-fc.toml": ("firecracker", True, False, 2048),
}


def test_all_nine_upstream_files_are_present() -> None:
    assert sorted(p.name for p in UPSTREAM) == sorted(EXPECTED)


@pytest.mark.parametrize("path", UPSTREAM, ids=[p.name for p in UPSTREAM])
def test_upstream_configuration_loads_unchanged(path: Path) -> None:
    cfg = load_config(path)
    hv, static, virtio, maxmem = EXPECTED[path.name]
    assert (cfg.hypervisor, cfg.static_sandbox_resource_mgmt, cfg.enable_virtio_mem) == (
        hv,
        static,
        virtio,
    )
    assert cfg.default_maxmemory == maxmem * MiB
    assert cfg.default_memory == 2048 * MiB
    assert cfg.memory_slots == 10


def test_dropins_apply_alphabetically_later_wins(tmp_path: Path) -> None:
    main = tmp_path / "configuration.toml"
    main.write_bytes((KATA_CONFIGS / "configuration-qemu.toml").read_bytes())
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "20-later.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 8192\n"
    )
    (tmp_path / "config.d" / "10-first.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 4096\nmemory_slots = 4\n"
    )
    cfg = load_config(main)
    assert cfg.default_maxmemory == 8192 * MiB
    assert cfg.memory_slots == 4
    sources = dict(cfg.sources)
    assert "20-later.toml" in sources["hypervisor.qemu.default_maxmemory"].describe()
    assert "10-first.toml" in sources["hypervisor.qemu.memory_slots"].describe()
    assert [Path(f).name for f in cfg.files] == [
        "configuration.toml",
        "10-first.toml",
        "20-later.toml",
    ]


def test_every_entry_of_config_d_is_a_drop_in(tmp_path: Path) -> None:
    # Both runtimes read every entry, whatever its name (Go katautils decodeDropIns:
    # os.ReadDir; kata-types drop_in.rs update_from_dropins: fs::read_dir), sorted by
    # name. Before: only *.toml, so a drop-in named otherwise changed Kata's VM only.
    main = write_config(tmp_path / "configuration.toml")
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-max.conf").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 4096\n"
    )
    (tmp_path / "config.d" / ".60-slots").write_text("[hypervisor.qemu]\nmemory_slots = 3\n")
    cfg = load_config(main)
    assert (cfg.default_maxmemory, cfg.memory_slots) == (4096 * MiB, 3)
    assert [Path(f).name for f in cfg.files] == ["configuration.toml", ".60-slots", "50-max.conf"]
    (tmp_path / "config.d" / "notes.txt").write_text("not toml")
    with pytest.raises(ConfigError, match=r"config.d/notes.txt: invalid TOML"):
        load_config(main)


def test_drop_ins_are_beside_the_file_a_link_leads_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both runtimes resolve the path before looking for config.d (Go katautils
    # decodeConfig: ResolvePath, filepath.EvalSymlinks; kata-types TomlConfig::
    # load_raw_from_file: fs::canonicalize), and kata-deploy installs its drop-ins there
    # (tools/packaging/kata-deploy install.rs setup_runtime_directory). Before: beside the
    # link, so kata-mem sized with drop-ins Kata does not read and without Kata's own.
    (tmp_path / "runtimes" / "qemu").mkdir(parents=True)
    real = write_config(tmp_path / "runtimes" / "qemu" / "configuration-qemu.toml")
    (real.parent / "config.d").mkdir()
    (real.parent / "config.d" / "50-kata-deploy.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 4096\n"
    )
    link = tmp_path / "configuration-qemu.toml"
    link.symlink_to(real)
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-beside-the-link.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 8192\n"
    )
    monkeypatch.setattr("kata_mem.edges.config._SETTLED_NS", -(10**12))  # kept at once
    cfg = load_config(link)
    assert cfg.default_maxmemory == 4096 * MiB
    assert cfg.files == (str(link), str(real.parent / "config.d" / "50-kata-deploy.toml"))
    # A drop-in added where the link leads is seen by the next load, not a reused one.
    (real.parent / "config.d" / "60-later.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 2048\n"
    )
    assert load_config(link).default_maxmemory == 2048 * MiB


def test_a_load_resolves_the_drop_in_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reuse key held a config.d resolved apart from the one read: a link retargeted
    # between the two resolutions kept the identity of a directory not read, and a
    # drop-in added later where the files came from went unseen.
    for name, mib in (("a", 4096), ("b", 8192)):
        (tmp_path / name).mkdir()
        write_config(tmp_path / name / "configuration.toml")
        (tmp_path / name / "config.d").mkdir()
        (tmp_path / name / "config.d" / "50-max.toml").write_text(
            f"[hypervisor.qemu]\ndefault_maxmemory = {mib}\n"
        )
    link = tmp_path / "configuration.toml"
    link.symlink_to(tmp_path / "a" / "configuration.toml")
    resolve = dropin_dir
    calls: list[str] = []

    def retargeted(path: str | Path) -> str:
        if len(calls) == 1:  # the operator retargets the link after a first resolution
            link.unlink()
            link.symlink_to(tmp_path / "b" / "configuration.toml")
        calls.append(str(path))
        return resolve(path)

    monkeypatch.setattr("kata_mem.edges.config.dropin_dir", retargeted)
    monkeypatch.setattr("kata_mem.edges.config._SETTLED_NS", -(10**12))  # kept at once
    load_config(link)
    assert len(calls) == 1
    monkeypatch.setattr("kata_mem.edges.config.dropin_dir", resolve)
    (tmp_path / "b" / "config.d" / "60-later.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 2048\n"
    )
    reused = load_config(link)
    monkeypatch.setattr("kata_mem.edges.config._LOADED", {})
    assert reused == load_config(link)  # what a fresh read gives


def test_drop_ins_beside_a_link_are_said_unread(tmp_path: Path) -> None:
    # Neither Kata nor kata-mem reads them (dropin_dir): config check says so, naming
    # where they would have to be, rather than leave an operator's drop-in ignored.
    (tmp_path / "real").mkdir()
    real = write_config(tmp_path / "real" / "configuration.toml")
    link = tmp_path / "configuration.toml"
    link.symlink_to(real)
    assert unread_dropins(link) is None  # no config.d beside the link
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-kata-mem.toml").write_text("[kata_mem]\nallow_shrink = true\n")
    assert unread_dropins(link) == (
        f"{tmp_path}/config.d is not read: {link} is a link to {real}, and Kata (and "
        f"kata-mem) read the drop-ins beside the file a link leads to, in "
        f"{tmp_path}/real/config.d; move them there"
    )
    assert unread_dropins(real) is None  # not a link
    # A link to the directory leads to the config.d read: nothing unread (it said
    # "linkdir/config.d is not read ... move them there", the same directory).
    (tmp_path / "linkdir").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "config.d").mkdir()
    assert unread_dropins(tmp_path / "linkdir" / "configuration.toml") is None
    # Nor a config.d beside the link that is itself a link to the one read.
    (tmp_path / "config.d" / "50-kata-mem.toml").unlink()
    (tmp_path / "config.d").rmdir()
    (tmp_path / "config.d").symlink_to(tmp_path / "real" / "config.d")
    assert unread_dropins(link) is None


def test_bundled_box_dropins(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "boxes" / "4x16" / "configuration.toml")
    assert (cfg.default_memory, cfg.default_maxmemory) == (16384 * MiB, 16384 * MiB)
    assert (cfg.default_vcpus, cfg.default_maxvcpus) == (Fraction(4), 4)


@pytest.mark.parametrize("box", ["1x4", "2x8", "4x16"])
def test_a_box_is_the_qemu_sample_as_a_file_kata_reads_its_drop_in_beside(box: str) -> None:
    # A copy, not a link: Kata looks for config.d beside the file a link leads to
    # (edges/config.py dropin_dir), where a box's drop-in would not be.
    main = REPO / "configs" / "boxes" / box / "configuration.toml"
    assert not main.is_symlink()
    assert main.read_bytes() == (REPO / "configs" / "configuration-qemu.toml").read_bytes()
    assert load_config(main).files[1:] == (str(main.parent / "config.d" / "50-box.toml"),)


def test_bundled_samples_load() -> None:
    assert not load_config(REPO / "configs" / "configuration-qemu.toml").enable_virtio_mem
    assert load_config(REPO / "configs" / "configuration-qemu-virtio-mem.toml").enable_virtio_mem


def test_fallback_is_recorded(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", {"default_memory": 100, "memory_slots": 0}))
    sources = dict(cfg.sources)
    assert "Kata uses 2048" in sources["hypervisor.qemu.default_memory"].describe()
    assert "0 means 10" in sources["hypervisor.qemu.memory_slots"].describe()
    assert sources["kata_mem.headroom_percent"].describe() == "default (10)"


def test_settings_table(tmp_path: Path) -> None:
    cfg = load_config(
        write_config(tmp_path / "c.toml", kata_mem={"headroom_min_mib": 256, "allow_shrink": True})
    )
    assert cfg.settings.headroom_min == 256 * MiB
    assert cfg.settings.allow_shrink is True


@pytest.mark.parametrize(
    ("hypervisor", "kata_mem", "message"),
    [
        (
            {"default_memory": -1},
            None,
            r"\[hypervisor.qemu\] default_memory: expected a non-negative integer \(MiB\), got -1",
        ),
        (
            {"default_memory": "2G"},
            None,
            r"default_memory: expected a non-negative integer \(MiB\), got '2G'",
        ),
        ({"default_maxmemory": 1.5}, None, r"default_maxmemory: expected a non-negative integer"),
        (
            {"enable_virtio_mem": "yes"},
            None,
            r"enable_virtio_mem: expected true or false, got 'yes'",
        ),
        ({"default_vcpus": True}, None, r"default_vcpus: expected a number of vCPUs"),
        (
            {},
            {"headroom_percent": 150},
            r"\[kata_mem\] headroom_percent: expected an integer from 0 to 100, got 150",
        ),
        ({}, {"dimm_block_mib": 100}, r"dimm_block_mib: expected a power of two"),
        # Beyond what QEMU and libvirt take (QEMU: "timer value is too big", at apply time).
        (
            {},
            {"stats_interval_s": 4294967296},
            r"stats_interval_s: expected an integer from 1 to 2147483647 \(seconds; libvirt's",
        ),
        (
            {},
            {"stats_interval_s": 10},
            r"stats_interval_s: 10 is not below \[kata_mem\] usage_max_age_s \(5.0\)",
        ),
        ({}, {"bogus": 1}, r"\[kata_mem\] bogus: unknown kata-mem setting"),
    ],
)
def test_bad_values_name_file_key_and_expectation(
    tmp_path: Path, hypervisor: dict[str, object], kata_mem: dict[str, object] | None, message: str
) -> None:
    path = write_config(tmp_path / "c.toml", hypervisor, kata_mem=kata_mem)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_bad_toml(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[hypervisor.qemu\ndefault_memory = 1\n")
    with pytest.raises(ConfigError, match=r"c.toml: invalid TOML: .*line 1"):
        load_config(path)


def test_no_or_two_hypervisors(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[runtime]\n")
    with pytest.raises(ConfigError, match=r"no \[hypervisor.NAME\] section"):
        load_config(path)
    path.write_text("[hypervisor.qemu]\n[hypervisor.clh]\n")
    with pytest.raises(ConfigError, match=r"exactly one .*\[hypervisor.clh\], \[hypervisor.qemu\]"):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(tmp_path / "nope.toml")


def test_find_config_order(tmp_path: Path) -> None:
    named = write_config(tmp_path / "y.toml", {})
    assert find_config("x.toml", {"KATA_CONF_FILE": str(named)}) == (Path("x.toml"), "--config")
    assert find_config(None, {"KATA_CONF_FILE": str(named)}) == (named, "KATA_CONF_FILE")


@pytest.mark.parametrize(
    "text",
    [
        "[hypervisor.qemu]\nkata_mem = 5\n",  # a key of [hypervisor.qemu], not a table
        '[hypervisor.qemu]\nkata_mem.state_dir = "/x"\n',  # a table inside it
        "[hypervisor.qemu]\n[runtime.kata_mem]\nallow_shrink = true\n",
    ],
)
def test_a_kata_mem_key_inside_another_table_is_refused(tmp_path: Path, text: str) -> None:
    # Read by neither Kata nor kata-mem, it left every setting at its default.
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"c.toml: \[\w+(\.qemu)?\] kata_mem: .*top-level"):
        load_config(path)


def test_a_number_too_large_for_a_float_is_shown_as_the_file_has_it(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {"default_vcpus": 1}, kata_mem={"step_timeout_s": 1})
    path.write_text(path.read_text().replace("step_timeout_s = 1", "step_timeout_s = 1e400"))
    with pytest.raises(
        ConfigError,
        match=r"step_timeout_s: expected a number of seconds from 0.1 to 3600, got 1e400$",
    ):
        load_config(path)


def test_load_config_takes_a_path_as_a_string(tmp_path: Path) -> None:
    # The public API (kata_mem.load_config) is typed str | Path.
    path = write_config(tmp_path / "c.toml", {"default_memory": 512})
    assert load_config(str(path)).default_memory == 512 * MiB


def test_config_check_says_when_drop_ins_beside_a_link_are_not_read(
    run_cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    (tmp_path / "real").mkdir()
    real = write_config(tmp_path / "real" / "configuration.toml")
    link = tmp_path / "configuration.toml"
    link.symlink_to(real)
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-kata-mem.toml").write_text("[kata_mem]\n")
    r = run_cli("config", "check", str(link))
    assert r.code == 0, r.err
    assert f"WARNING: {tmp_path}/config.d is not read: {link} is a link to {real}" in r.err


def test_a_distribution_s_kata_configuration_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Go runtime's build default is PREFIX /usr (src/runtime/Makefile: DEFAULTSDIR
    # $(PREFIX)/share/defaults, CONFIG_PATH), as distributions package it; kata-deploy
    # builds with /opt/kata. Before: only /etc and /opt/kata, so a packaged Kata's
    # node had "no Kata configuration found".
    packaged = "/usr/share/defaults/kata-containers/configuration.toml"
    monkeypatch.setattr(Path, "exists", lambda self: str(self) == packaged)
    assert find_config(None, {}) == (Path(packaged), "Kata default location")


#: ``shared_fs`` as each packaged file's runtime reads it (the Go runtime's default is
#: virtio-fs, runtime-rs's none: kata_mem.edges.config ``_shared_fs``).
SHARED_FS = {
    "configuration-qemu.toml": "virtio-fs",
    "configuration-clh.toml": "virtio-fs",
    "configuration-fc.toml": "virtio-fs",
    "configuration-qemu-snp.toml": "none",
    "configuration-stratovirt.toml": "virtio-fs",
    "configuration-qemu-runtime-rs.toml": "virtio-fs",
    "configuration-dragonball.toml": "inline-virtio-fs",
    "configuration-clh-runtime-rs.toml": "virtio-fs",
    "configuration-rs-fc.toml": "none",
}


@pytest.mark.parametrize(("name", "shared_fs"), sorted(SHARED_FS.items()))
def test_each_packaged_file_shares_its_file_system(name: str, shared_fs: str) -> None:
    cfg = load_config(KATA_CONFIGS / name)
    assert (cfg.shared_fs, cfg.file_mem_backend) == (shared_fs, "")


@pytest.mark.parametrize(
    ("runtime", "shared_fs", "note"),
    [
        ("go", "virtio-fs", "the Go runtime shares virtio-fs (katautils/config.go sharedFS)"),
        ("runtime-rs", "none", "runtime-rs shares no file system"),
    ],
)
def test_an_unset_shared_fs_is_the_runtime_s_default(
    tmp_path: Path, runtime: str, shared_fs: str, note: str
) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", kata_mem={"runtime": runtime}))
    assert cfg.shared_fs == shared_fs
    origin = cfg.origin("hypervisor.qemu.shared_fs")
    assert (origin.kind, origin.value) == ("default", shared_fs) and note in origin.note


@pytest.mark.parametrize("runtime", ["go", "runtime-rs"])
def test_an_empty_shared_fs_is_virtio_fs(tmp_path: Path, runtime: str) -> None:
    cfg = load_config(
        write_config(tmp_path / "c.toml", {"shared_fs": ""}, kata_mem={"runtime": runtime})
    )
    assert cfg.shared_fs == "virtio-fs"
    assert '"" is virtio-fs' in cfg.origin("hypervisor.qemu.shared_fs").describe()


@pytest.mark.parametrize(
    ("runtime", "value", "expected"),
    [
        ("go", "inline-virtio-fs", "'virtio-9p', 'virtio-fs', 'virtio-fs-nydus', 'none'"),
        ("go", "virtiofs", "'virtio-9p', 'virtio-fs', 'virtio-fs-nydus', 'none'"),
        ("runtime-rs", "virtio-9p", "'virtio-fs', 'inline-virtio-fs', 'virtio-fs-nydus', 'none'"),
    ],
)
def test_a_shared_fs_the_runtime_refuses_for_qemu_is_a_configuration_error(
    tmp_path: Path, runtime: str, value: str, expected: str
) -> None:
    path = write_config(tmp_path / "c.toml", {"shared_fs": value}, kata_mem={"runtime": runtime})
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: [hypervisor.qemu] shared_fs: {value!r} is not a shared file system Kata's "
        f"{'Go runtime' if runtime == 'go' else 'runtime-rs'} starts a QEMU VM with; "
        f"expected one of {expected}"
    )


def test_a_shared_fs_of_another_hypervisor_is_kept_as_written(tmp_path: Path) -> None:
    # kata-mem plugs DIMMs into QEMU only; Kata's Go runtime reads no shared_fs for
    # Firecracker (katautils/config.go newFirecrackerHypervisorConfig).
    path = write_config(tmp_path / "c.toml", {"shared_fs": "anything"}, name="firecracker")
    assert load_config(path).shared_fs == "anything"


def test_file_mem_backend_is_read_as_an_absolute_directory(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", {"file_mem_backend": "/var/lib/mem"}))
    assert cfg.file_mem_backend == "/var/lib/mem"
    assert (
        load_config(write_config(tmp_path / "d.toml", {"file_mem_backend": ""})).file_mem_backend
        == ""
    )
    path = write_config(tmp_path / "e.toml", {"file_mem_backend": "mem"})
    with pytest.raises(
        ConfigError, match=r"\[hypervisor.qemu\] file_mem_backend: expected an absolute path"
    ):
        load_config(path)


def _with_dropin(tmp_path: Path, main: str, dropin: str) -> Path:
    path = tmp_path / "configuration.toml"
    path.write_text('[hypervisor.qemu]\npath = "/usr/bin/qemu"\n' + main)
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-x.toml").write_text(dropin)
    return path


@pytest.mark.parametrize(
    ("main", "dropin", "named"),
    [
        ("default_vcpus = true\n", "[hypervisor.qemu]\ndefault_vcpus = 2\n", "default_vcpus"),
        (
            "[runtime]\nstatic_sandbox_resource_mgmt = 1\n",
            "[runtime]\nstatic_sandbox_resource_mgmt = true\n",
            "static_sandbox_resource_mgmt",
        ),
        ("memory_slots = 4294967296\n", "[hypervisor.qemu]\nmemory_slots = 4\n", "memory_slots"),
    ],
)
def test_a_value_a_drop_in_sets_again_is_still_checked_in_its_own_file(
    tmp_path: Path, main: str, dropin: str, named: str
) -> None:
    # Kata's Go runtime decodes the file, then each drop-in, on its own (katautils
    # decodeConfig, updateFromDropIn: toml.Decode), and refuses the wrong value where it
    # is; kata-mem checked only the merged value (the Kata oracle's cases, issue 34).
    with pytest.raises(ConfigError, match=rf"configuration.toml: \[\w+(\.qemu)?\] {named}: "):
        load_config(_with_dropin(tmp_path, main, dropin))


def test_runtime_rs_reads_the_merged_value(tmp_path: Path) -> None:
    # kata-types drop_in.rs merges the TOML values first and decodes once.
    path = _with_dropin(
        tmp_path,
        'default_vcpus = true\n[runtime]\nname = "virt_container"\n',
        "[hypervisor.qemu]\ndefault_vcpus = 2\n",
    )
    assert load_config(path).default_vcpus == 2


def test_a_hypervisor_table_a_drop_in_only_opens_is_none_for_the_go_runtime(
    tmp_path: Path,
) -> None:
    # Go applies a drop-in's keys only (updateFromDropIn: applyKey), so an empty
    # [hypervisor.clh] there adds no hypervisor; kata-mem refused two tables.
    path = _with_dropin(tmp_path, "default_memory = 4096\n", "[hypervisor.clh]\n")
    assert (load_config(path).hypervisor, load_config(path).default_memory) == ("qemu", 4096 * MiB)
    (tmp_path / "config.d" / "60-y.toml").write_text("[hypervisor.clh]\ndefault_memory = 1024\n")
    with pytest.raises(ConfigError, match=r"expected exactly one \[hypervisor.NAME\] section"):
        load_config(path)


def test_a_hypervisor_kata_does_not_drive_is_refused(tmp_path: Path) -> None:
    # Go updateRuntimeConfigHypervisor: "configuration file contains invalid hypervisor
    # section"; kata-mem planned for [hypervisor.foo].
    with pytest.raises(ConfigError, match=r"\[hypervisor.foo\] is not a hypervisor Kata's Go"):
        load_config(write_config(tmp_path / "c.toml", name="foo"))
    with pytest.raises(
        ConfigError, match=r"\[hypervisor.stratovirt\] is not a hypervisor Kata's runtime-rs"
    ):
        load_config(write_config(tmp_path / "c.toml", {"overhead_memory": 32}, name="stratovirt"))
