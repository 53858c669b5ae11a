"""Read a Kata runtime configuration (TOML) as installed, with its drop-ins.

Only the sizing keys are read; the hundreds of other keys are ignored. Kata's
defaults and fallbacks are applied here and every effective value records where
it came from. kata-mem's own settings live in a ``[kata_mem]`` table of the same
files (Kata ignores tables it does not know).

One module (about 900 lines) because reading a configuration is one pass over one merged
table: find the file as Kata does, merge its drop-ins, read Kata's sizing keys with their
defaults and origins, then ``[kata_mem]`` with its checks across keys; every error names
the file and key that gave the value through the one ``_Reader``, which each part needs.
"""

from __future__ import annotations

import copy
import os
import stat
import sys
import time
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional

from kata_mem.core.errors import ConfigError
from kata_mem.core.fields import (
    Fields,
    is_bool,
    is_int,
    is_number,
    is_str,
    spelled_float,
    toml_value,
)
from kata_mem.core.golang import toml_float32
from kata_mem.core.model import (
    ONLININGS,
    RUNTIMES,
    SIZING_MODELS,
    Origin,
    Runtime,
    Settings,
    SizingConfig,
)
from kata_mem.core.units import INT64_MAX, MiB, to_mib_floor
from kata_mem.core.values import fields, replace
from kata_mem.edges.files import CONFIG_CAP, not_regular, read_capped
from kata_mem.edges.ownership import check_way, mode, others_could_write, who

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

#: Where Kata looks when no file is given, in order (after ``KATA_CONF_FILE``): the Go
#: runtime's ``GetDefaultConfigFilePaths`` (katautils/config.go), the system file, then
#: its build's default, which is kata-deploy's under /opt/kata and, with the Makefile's
#: own PREFIX /usr (src/runtime/Makefile ``DEFAULTSDIR``), a distribution package's.
DEFAULT_PATHS = (
    "/etc/kata-containers/configuration.toml",
    "/opt/kata/share/defaults/kata-containers/configuration.toml",
    "/usr/share/defaults/kata-containers/configuration.toml",
)

#: Kata's Go-runtime build defaults (src/runtime/Makefile).
KATA_DEFAULT_MEMORY_MIB = 2048
KATA_MIN_MEMORY_MIB = 256
KATA_DEFAULT_SLOTS = 10

Origins = dict[tuple[str, ...], str]


def find_config(explicit: Optional[str], env: Mapping[str, str]) -> tuple[Path, str]:
    """The configuration file to use and why it was chosen.

    Only looks at the candidates (never opens one), so a FIFO cannot block here; the
    file is read, or refused, by :func:`load_raw`.

    :raises ConfigError: when KATA_CONF_FILE names something that is not a regular
        file, or no file is given and none exists where Kata looks.
    """
    found, why = config_path(explicit, env)
    return Path(found), why


def config_path(explicit: Optional[str], env: Mapping[str, str]) -> tuple[str, str]:
    """:func:`find_config`'s choice as a string (``kata-mem serve`` chooses on every
    request, and a ``Path`` costs more than the rest of the choice)."""
    if explicit:
        return explicit, "--config"
    from_env = env.get("KATA_CONF_FILE")
    if from_env:
        why = not_regular(from_env)
        if why == "does not exist":
            raise ConfigError(f"{from_env}: no such configuration file (named by KATA_CONF_FILE)")
        if why:
            raise ConfigError(
                f"{from_env}: {why}, expected a regular configuration file (named by KATA_CONF_FILE)"
            )
        return from_env, "KATA_CONF_FILE"
    for candidate in DEFAULT_PATHS:
        # As Kata: the first candidate that exists is the one, whatever it is (a FIFO or
        # a directory there is then refused when read, not skipped in silence).
        if Path(candidate).exists():
            return candidate, "Kata default location"
    raise ConfigError(
        "no Kata configuration found: pass --config FILE, set KATA_CONF_FILE, or install one at "
        + " or ".join(DEFAULT_PATHS)
    )


def _trusted(path: Path) -> Optional[Callable[[os.stat_result], None]]:
    """As root, the check that no other user could have written the configuration file
    ``path`` (:mod:`kata_mem.edges.ownership`): it chooses where root creates directories
    and files (``state_dir``), what it hands QEMU (``hugepages_path``) and whether shrink
    safety holds (``allow_shrink``, the headroom). None for another user, whose files are
    its own business (root's configuration is readable by it, and used as it is).

    :raises ConfigError: a directory or symlink on the way to it is another user's.
    """
    if os.geteuid() != 0:
        return None
    check_way(path, str(path), "this configuration file")

    def check(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            return  # a device or FIFO: read_open refuses it for what it is, before reading
        if others_could_write(info):
            raise ConfigError(
                f"{path}: owned by {who(info.st_uid)}, mode {mode(info)}; kata-mem runs as "
                "root and reads a configuration file only when root owns it and no group or "
                "other user can write it (as sudo reads sudoers), so it was not read. If it is "
                f"trusted: chown root {path}; chmod go-w {path}"
            )

    return check


def _read_toml(path: Path) -> dict[str, Any]:
    data = read_capped(
        path, cap=CONFIG_CAP, what="configuration", error=ConfigError, check=_trusted(path)
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 (byte {exc.start})") from exc
    try:
        return tomllib.loads(text, parse_float=spelled_float)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(
            f"{path}: invalid TOML: arrays or inline tables nested too deeply to read (more"
            " than a few hundred levels); a Kata configuration is a few levels deep"
        ) from exc
    except ValueError as exc:
        # int() refuses integers of more than 4300 digits (CVE-2020-10735), in words that
        # differ between Pythons and point at an interpreter setting: say it in our own.
        raise ConfigError(
            f"{path}: invalid TOML: an integer of more than 4300 digits; Kata reads 64-bit "
            "integers (at most 19 digits)"
        ) from exc


def _merge(
    into: dict[str, Any],
    new: Mapping[str, Any],
    origins: Origins,
    file: str,
    prefix: tuple[str, ...] = (),
) -> None:
    for key, value in new.items():
        path = (*prefix, key)
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, origins, file, path)
        else:
            into[key] = value
            _record(origins, path, value, file)


def _record(origins: Origins, path: tuple[str, ...], value: Any, file: str) -> None:
    origins[path] = file
    if isinstance(value, dict):
        for k, v in value.items():
            _record(origins, (*path, k), v, file)


def dropin_dir(path: str | Path) -> str:
    """The ``config.d`` directory of the configuration file ``path``: beside the file a
    symlink leads to, not beside the link. Both runtimes resolve the path first (Go
    katautils ``decodeConfig``: ``ResolvePath``, ``filepath.EvalSymlinks``; kata-types
    ``TomlConfig::load_raw_from_file``: ``fs::canonicalize``), and kata-deploy relies on
    it: each shim's configuration is a link to a per-shim copy with its ``config.d``
    beside it (tools/packaging/kata-deploy install.rs ``setup_runtime_directory``)."""
    return os.path.join(os.path.dirname(os.path.realpath(path)), "config.d")


def unread_dropins(path: str | Path) -> Optional[str]:
    """Why a ``config.d`` beside ``path`` is not read when ``path`` is a link to a file
    in another directory (:func:`dropin_dir`); None when there is none, or it is read.
    An operator who installs a drop-in beside kata-deploy's link would otherwise see
    it ignored by Kata and kata-mem alike, with nothing said."""
    given = os.path.join(os.path.dirname(os.path.abspath(path)), "config.d")
    read = dropin_dir(path)
    # Compared resolved: a directory on the path that is a link (or a config.d that is
    # one) leads to the very directory read, which is not "another" one.
    if not os.path.isdir(given) or os.path.realpath(given) == os.path.realpath(read):
        return None
    return (
        f"{given} is not read: {path} is a link to {os.path.realpath(path)}, and Kata "
        "(and kata-mem) read the drop-ins beside the file a link leads to, in "
        f"{read}; move them there"
    )


def load_raw(path: Path) -> tuple[dict[str, Any], Origins, tuple[str, ...], str]:
    """The merged TOML of ``path`` and its drop-ins (every entry of :func:`dropin_dir`,
    by name, later wins), the file each key came from, the files read in order, and the
    drop-in directory looked in (resolved once: a link retargeted meanwhile would make
    another resolution name a directory that was not read)."""
    data, origins, files, where, _ = _load_files(path)
    return data, origins, files, where


def _load_files(
    path: Path,
) -> tuple[dict[str, Any], Origins, tuple[str, ...], str, list[dict[str, Any]]]:
    """:func:`load_raw`, and each file's own TOML, in the order read."""
    data: dict[str, Any] = {}
    origins: Origins = {}
    files = [path]
    where = dropin_dir(path)
    dropins = Path(where)
    if dropins.is_dir():
        if os.geteuid() == 0:  # whoever may write it may add a drop-in
            check_way(dropins, str(path), "its drop-ins", itself=True)
        # Every entry, whatever its name, sorted by name as both runtimes read them (Go
        # decodeDropIns: os.ReadDir; kata-types drop_in.rs update_from_dropins: read_dir,
        # sort_by_key(file_name)): a file that is not TOML makes Kata refuse to start,
        # and one that is changes its VM. Not only regular files: a FIFO or device there
        # is refused when read, rather than skipped so that the configuration silently
        # differs from the files.
        found = sorted(dropins.iterdir(), key=lambda entry: os.fsencode(entry.name))
        for entry in found:
            if entry.is_dir():
                # Both runtimes read every entry of config.d and fail on a directory (Go
                # katautils decodeDropIns: os.ReadFile; kata-types drop_in.rs
                # update_from_dropin: "drop-in cfg file can only be a regular file").
                raise ConfigError(
                    f"{entry}: a directory among the drop-ins of {path}; Kata refuses to "
                    "start with it (it reads every entry of config.d as a drop-in file); "
                    "expected drop-in files only (move it out of config.d)"
                )
        files += found
    each = [_read_toml(f) for f in files]
    for f, own in zip(files, each, strict=True):
        _merge(data, copy.deepcopy(own), origins, str(f))  # each file's own kept as read
    return data, origins, tuple(str(f) for f in files), where, each


class _Reader:
    """Typed access to one table, with errors that name the file, key and expectation,
    and a record of where each value came from."""

    def __init__(
        self, table: Mapping[str, Any], path: tuple[str, ...], origins: Origins, fallback_file: str
    ) -> None:
        self.table = table
        self.path = path
        self.origins = origins
        self.fallback_file = fallback_file
        self.sources: list[tuple[str, Origin]] = []

    def fields(self, key: str) -> Fields:
        """The file that set ``key`` (or would have), for its errors."""
        file = self.origins.get((*self.path, key), self.fallback_file)
        return Fields(f"{file}:", ConfigError, toml_value)

    def at(self, key: str) -> str:
        return f"[{'.'.join(self.path)}] {key}"

    def where(self, key: str) -> str:
        return self.fields(key).name(self.at(key))

    def get(self, key: str, default: Any, check: Callable[[Any], bool], expected: str) -> Any:
        if key not in self.table:
            self.sources.append((key, Origin("default", value=toml_value(default))))
            return default
        value = self.table[key]
        if not check(value):
            raise self.fields(key).fail(self.at(key), expected, value)
        file = self.origins.get((*self.path, key), self.fallback_file)
        self.sources.append((key, Origin("file", str(file), self.at(key), toml_value(value))))
        return value

    def note(self, key: str, text: str) -> None:
        self.sources = [
            (k, replace(s, note=f"{s.note}; {text}" if s.note else text) if k == key else s)
            for k, s in self.sources
        ]


def _nonneg_int(v: Any) -> bool:
    return is_int(v) and v >= 0


#: The ranges of the Go types Kata decodes the sizing keys into (src/runtime/pkg/
#: katautils/config.go, ``type hypervisor``), as its TOML decoder (BurntSushi/toml
#: ``unifyInt``, ``unifyFloat64``) enforces them: Kata refuses a value outside.
UINT32_MAX = (1 << 32) - 1
FLOAT32_MAX = 3.4028234663852886e38
FLOAT32_SAFE_INT = (1 << 24) - 1


def _in_range(
    reader: _Reader, key: str, value: float, low: float, high: float, kata_type: str
) -> None:
    if not low <= value <= high:
        raise ConfigError(
            f"{reader.where(key)}: {toml_value(value)} is out of range: Kata reads it as a "
            f"{kata_type}, expected {toml_value(low)} to {toml_value(high)}"
        )


def _string_list(v: Any) -> bool:
    return isinstance(v, list) and all(is_str(p) for p in v)


#: The sizing keys of ``[hypervisor.NAME]``: what each must be, and the range of the Go
#: type Kata decodes it into (katautils/config.go ``type hypervisor``), or None.
_TYPED: dict[str, tuple[Callable[[Any], bool], str, Optional[tuple[float, float, str]]]] = {
    "default_memory": (
        _nonneg_int,
        "a non-negative integer (MiB)",
        (0, UINT32_MAX, "uint32 (MiB)"),
    ),
    "default_maxmemory": (
        _nonneg_int,
        "a non-negative integer (MiB; 0 = host memory)",
        (0, INT64_MAX, "uint64 (MiB) from a TOML integer"),
    ),
    "memory_slots": (_nonneg_int, "a non-negative integer", (0, UINT32_MAX, "uint32")),
    "memory_offset": (
        _nonneg_int,
        "a non-negative integer (MiB)",
        (0, INT64_MAX, "uint64 (MiB) from a TOML integer"),
    ),
    "enable_virtio_mem": (is_bool, "true or false", None),
    "enable_hugepages": (is_bool, "true or false", None),
    "default_vcpus": (is_number, "a number of vCPUs (<0 = all host CPUs)", None),
    "default_maxvcpus": (
        _nonneg_int,
        "a non-negative integer (0 = host CPUs)",
        (0, UINT32_MAX, "uint32"),
    ),
    "enable_annotations": (
        _string_list,
        "a list of strings (patterns of hypervisor annotation names)",
        None,
    ),
    "kernel_params": (is_str, "a string (the guest kernel's parameters)", None),
    "shared_fs": (is_str, "a string (the file system shared with the guest)", None),
}


def _typed(reader: _Reader, key: str, default: Any) -> Any:
    """The value of the sizing key ``key`` (``default`` when unset), refused unless it is
    of its type and range (:data:`_TYPED`)."""
    check, expected, bounds = _TYPED[key]
    value = reader.get(key, default, check, expected)
    if key == "default_vcpus" and key in reader.table:
        # A float32: an integer decoded into one must be exact (BurntSushi
        # ``maxSafeFloat32Int``), a float within float32's range (``unifyFloat64``).
        if is_int(value):
            _in_range(reader, key, value, -FLOAT32_SAFE_INT, FLOAT32_SAFE_INT, "float32")
        else:
            _in_range(reader, key, value, -FLOAT32_MAX, FLOAT32_MAX, "float32")
    elif bounds is not None and key in reader.table:
        _in_range(reader, key, value, *bounds)
    return value


def _each_file_typed(each: list[dict[str, Any]], files: tuple[str, ...]) -> None:
    """Kata's Go runtime decodes the file and then each drop-in on its own into its typed
    structs (katautils/config.go ``decodeConfig``, ``updateFromDropIn``: ``toml.Decode``),
    so a value of the wrong type or range is refused even where a later file sets the
    key again; runtime-rs merges the files first and decodes once (kata-types
    ``drop_in.rs``), as :func:`_load_config` reads the merged table.

    :raises ConfigError: naming the file and key."""
    for own, file in zip(each, files, strict=True):
        hypervisors = own.get("hypervisor", {})
        tables = hypervisors.items() if isinstance(hypervisors, dict) else ()
        for name, table in tables:
            if isinstance(table, dict):
                reader = _Reader(table, ("hypervisor", name), {}, file)
                for key in _TYPED.keys() & table.keys():
                    _typed(reader, key, None)
        runtime = own.get("runtime", {})
        if isinstance(runtime, dict):
            _Reader(runtime, ("runtime",), {}, file).get(
                "static_sandbox_resource_mgmt", False, is_bool, "true or false"
            )


#: (file identity, the drop-in directory's, each file read's) -> what they gave; for
#: ``kata-mem serve``, which would otherwise parse the TOML on every request.
_Signature = tuple[tuple[int, ...], ...]
_LOADED: dict[str, tuple[_Signature, SizingConfig, str]] = {}
_LOADED_MAX = 64
_SETTLED_NS = 1_000_000_000


def _identity(path: str | Path) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _signature(dropins: str, files: tuple[str, ...]) -> _Signature:
    # The directory changes when a drop-in is added, removed or renamed; a file, when
    # it is written (ctime too, so an edit that keeps size and mtime still counts).
    # Strings, not pathlib: this runs on every request kata-mem serve answers. The
    # drop-in directory is the one :func:`load_raw` read: a link that now leads
    # elsewhere leads to another file, whose identity differs.
    return (_identity(dropins), *[_identity(f) for f in files])


def load_config(path: str | Path) -> SizingConfig:
    """Load the sizing configuration from ``path`` and its drop-ins.

    The result is reused while the files it was read from, and the drop-in directory,
    are unchanged (same inode, size, mtime and ctime); errors are never reused.

    :raises ConfigError: for a missing or unreadable file, invalid TOML, no or
        several ``[hypervisor.NAME]`` sections, or a sizing key of the wrong
        type or range; the message names the file and key.
    """
    key = os.fspath(path)
    cached = _LOADED.get(key)
    if cached is not None and cached[0] == _signature(cached[2], cached[1].files):
        return cached[1]
    started = time.time_ns()
    cfg, dropins = _load_config(Path(path))
    signature = _signature(dropins, cfg.files)
    # A file changed while (or just before) it was read may not be what was read: not
    # kept until it has been still for a while (file times lag the clock by a tick).
    if all(ident and ident[-1] < started - _SETTLED_NS for ident in signature[1:]):
        if len(_LOADED) >= _LOADED_MAX:
            _LOADED.clear()
        _LOADED[key] = (signature, cfg, dropins)
    return cfg


def _not_one_table(
    tables: Mapping[str, Any], origins: Origins, files: tuple[str, ...], first: str
) -> ConfigError:
    read, names = first, ", ".join(f"[hypervisor.{n}]" for n in sorted(tables))
    if len(files) > 1:
        # Each named with its files: often a drop-in added one, not the main file.
        read = f"{first} with its drop-ins"
        names = ", ".join(
            f"[hypervisor.{n}] (in {_table_file(origins, n, first)})" for n in sorted(tables)
        )
    return ConfigError(
        f"{read}: expected exactly one [hypervisor.NAME] section, found {names or 'none'}"
    )


def _table_file(origins: Origins, name: str, first: str) -> str:
    """The files that set keys of ``[hypervisor.NAME]``, first the one that added it."""
    files = dict.fromkeys(f for key, f in origins.items() if key[:2] == ("hypervisor", name))
    return ", ".join(files) or first


def _misplaced_settings(data: Mapping[str, Any], origins: Origins, first: str) -> None:
    """Refuse a ``kata_mem`` key inside another table (``kata_mem = 5`` written below
    ``[hypervisor.qemu]`` is that table's key): neither Kata nor kata-mem reads it, so
    the settings meant would silently be the defaults.

    :raises ConfigError: naming the file and the table it is in.
    """
    todo: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        ((name,), value) for name, value in data.items() if isinstance(value, dict)
    ]
    while todo:
        at, table = todo.pop()
        if "kata_mem" in table:
            raise ConfigError(
                f"{origins.get((*at, 'kata_mem'), first)}: [{'.'.join(at)}] kata_mem: "
                "kata-mem's settings are the top-level [kata_mem] table, and a kata_mem "
                "key inside another table is read by neither Kata nor kata-mem; expected "
                "a [kata_mem] table header on a line of its own"
            )
        todo += [((*at, k), v) for k, v in table.items() if isinstance(v, dict)]


def _load_config(path: Path) -> tuple[SizingConfig, str]:
    """The configuration of ``path`` and the drop-in directory it was read with."""
    data, origins, files, dropins, each = _load_files(path)
    first = str(path)
    _misplaced_settings(data, origins, first)
    hypervisors = data.get("hypervisor", {})
    if not isinstance(hypervisors, dict) or not hypervisors:
        where = origins.get(("hypervisor",), first)  # a drop-in may have set it to a value
        raise ConfigError(
            f"{where}: no [hypervisor.NAME] section (expected one, e.g. [hypervisor.qemu])"
        )
    tables = {k: v for k, v in hypervisors.items() if isinstance(v, dict)}
    # The Go runtime takes from a drop-in only the keys it sets (katautils/config.go
    # updateFromDropIn: applyKey skips a key of fewer than three parts), so a
    # [hypervisor.NAME] that only a drop-in opens, setting nothing, is no table of its;
    # runtime-rs merges the tables, empty ones included (kata-types drop_in.rs).
    kept = {k: v for k, v in tables.items() if v or origins.get(("hypervisor", k)) == first}
    only_go = len(tables) > 1 and len(kept) == 1
    if len(tables) != 1 and not only_go:
        raise _not_one_table(tables, origins, files, first)
    name, table = next(iter(kept.items() if only_go else tables.items()))
    hv = _Reader(table, ("hypervisor", name), origins, first)

    mem = _typed(hv, "default_memory", KATA_DEFAULT_MEMORY_MIB)
    if mem < KATA_MIN_MEMORY_MIB:
        hv.note(
            "default_memory",
            f"below {KATA_MIN_MEMORY_MIB} MiB, Kata uses {KATA_DEFAULT_MEMORY_MIB}",
        )
        mem = KATA_DEFAULT_MEMORY_MIB
    max_mem = _typed(hv, "default_maxmemory", 0)
    slots = _typed(hv, "memory_slots", KATA_DEFAULT_SLOTS)
    if slots == 0:
        hv.note("memory_slots", f"0 means {KATA_DEFAULT_SLOTS}")
        slots = KATA_DEFAULT_SLOTS
    offset = _typed(hv, "memory_offset", 0)
    virtio_mem = _typed(hv, "enable_virtio_mem", False)
    hugepages = _typed(hv, "enable_hugepages", False)
    vcpus = _typed(hv, "default_vcpus", 1)
    max_vcpus = _typed(hv, "default_maxvcpus", 0)
    patterns = tuple(_typed(hv, "enable_annotations", []))
    # Not compiled here: Kata's Go runtime compiles each pattern as Go's regexp when a pod
    # names an annotation, and a pattern that does not compile allows nothing there
    # (regexpContains drops the error), so a node whose pods name no annotation runs as
    # Kata runs it. kata_mem.core.annotations says so when it refuses an annotation.
    # runtime-rs only (kata-types config/hypervisor/mod.rs: CpuInfo.overhead_vcpus f32,
    # MemoryInfo.overhead_memory u32 MiB, both #[serde(default)]: 0 when unset).
    overhead_vcpus = overhead_memory = None
    if "overhead_vcpus" in table:
        raw = hv.get("overhead_vcpus", 0, is_number, "a number of vCPUs, e.g. 0.2")
        _in_range(hv, "overhead_vcpus", raw, 0, FLOAT32_MAX, "float32 of 0 or more")
        overhead_vcpus = toml_float32(raw)  # kata-types CpuInfo.overhead_vcpus: f32
    if "overhead_memory" in table:
        raw = hv.get("overhead_memory", 0, _nonneg_int, "a non-negative integer (MiB)")
        _in_range(hv, "overhead_memory", raw, 0, UINT32_MAX, "uint32 (MiB)")
        overhead_memory = raw * MiB

    # The guest kernel's command line: how it onlines hot-added memory (the guest's own
    # ceiling, kata_mem/core/guestmem.py). Kata decodes it as a string (config.go
    # ``KernelParams string``); the upstream configuration-qemu.toml sets no memhp option.
    kernel_params = _typed(hv, "kernel_params", "")

    runtime_table = data.get("runtime", {})
    if not isinstance(runtime_table, dict):
        raise ConfigError(f"{origins.get(('runtime',), first)}: [runtime] must be a table")
    rt = _Reader(runtime_table, ("runtime",), origins, first)
    static = rt.get("static_sandbox_resource_mgmt", False, is_bool, "true or false")

    settings, settings_sources = load_settings(data, origins, first)
    if settings.runtime is not None:
        runtime: Runtime = settings.runtime
        runtime_origin = dict(settings_sources)["kata_mem.runtime"]
    else:
        runtime, why = which_runtime(path, runtime_table, name, table)
        runtime_origin = Origin("default", value=runtime, note=why)
    if only_go and runtime != "go":
        raise _not_one_table(tables, origins, files, first)
    if name not in HYPERVISORS[runtime]:
        runtime_name = "Go runtime" if runtime == "go" else "runtime-rs"
        raise ConfigError(
            f"{_table_file(origins, name, first)}: [hypervisor.{name}] is not a hypervisor "
            f"Kata's {runtime_name} drives (it refuses the configuration: invalid hypervisor "
            f"section {name!r}); expected one of "
            + ", ".join(f"[hypervisor.{n}]" for n in HYPERVISORS[runtime])
        )
    if runtime == "go":
        _each_file_typed(each, files)
    # What a hot-added DIMM's memory must be (kata_mem.core.backing): the file system the
    # VM shares with the host, whose default is the runtime's, and the Go runtime's
    # file_mem_backend of Kata before 3.32.
    shared_fs = _shared_fs(hv, table, name, runtime)
    file_mem_backend = _file_mem_backend(hv, table)
    sources = [(f"hypervisor.{name}.{k}", s) for k, s in hv.sources]
    sources += [(f"runtime.{k}", s) for k, s in rt.sources]
    sources += settings_sources
    sources.append(("runtime", runtime_origin))
    cfg = SizingConfig(
        path=first,
        hypervisor=name,
        default_memory=mem * MiB,
        default_maxmemory=max_mem * MiB,
        memory_slots=slots,
        memory_offset=offset * MiB,
        enable_virtio_mem=virtio_mem,
        enable_hugepages=hugepages,
        static_sandbox_resource_mgmt=static,
        # Kata holds it as a float32 (katautils/config.go ``NumVCPUs float32``): 2.00000001
        # is 2.0, and 0.1 is 0.100000001490116.
        default_vcpus=toml_float32(vcpus),
        default_maxvcpus=max_vcpus,
        settings=settings,
        enable_annotations=patterns,
        overhead_vcpus=overhead_vcpus,
        overhead_memory=overhead_memory,
        runtime=runtime,
        sources=tuple(sources),
        files=files,
        kernel_params=kernel_params,
        shared_fs=shared_fs,
        file_mem_backend=file_mem_backend,
    )
    return cfg, dropins


#: The ``shared_fs`` values each runtime starts a QEMU VM with ("" is virtio-fs in both):
#: Go katautils/config.go ``sharedFS`` (``config.Virtio9P``, ``VirtioFS``,
#: ``VirtioFSNydus``, ``NoSharedFS``); runtime-rs kata-types config/hypervisor/mod.rs
#: ``SharedFsInfo::validate`` (``virtio-fs``, ``inline-virtio-fs``, ``virtio-fs-nydus``,
#: and ``none``, which ``adjust_config`` makes no file system). Each refuses any other.
SHARED_FS: dict[Runtime, tuple[str, ...]] = {
    "go": ("virtio-9p", "virtio-fs", "virtio-fs-nydus", "none"),
    "runtime-rs": ("virtio-fs", "inline-virtio-fs", "virtio-fs-nydus", "none"),
}


def _shared_fs(hv: _Reader, table: Mapping[str, Any], hypervisor: str, runtime: Runtime) -> str:
    """``shared_fs`` as the runtime reads it: unset, the Go runtime shares virtio-fs
    (``sharedFS`` returns ``config.VirtioFS`` for ""), while runtime-rs shares none (its
    ``shared_fs`` is an ``Option`` that serde leaves ``None``); "" is virtio-fs in both
    (runtime-rs ``DEFAULT_SHARED_FS_TYPE``). A value the runtime refuses for QEMU is a
    configuration error, as Kata does not start the VM; for other hypervisors, whose
    DIMMs kata-mem does not plug, it is kept as written.

    :raises ConfigError: not a string, or (``[hypervisor.qemu]``) not one of
        :data:`SHARED_FS`.
    """
    if "shared_fs" not in table:
        default = "virtio-fs" if runtime == "go" else "none"
        why = (
            "unset: the Go runtime shares virtio-fs (katautils/config.go sharedFS)"
            if runtime == "go"
            else "unset: runtime-rs shares no file system (kata-types SharedFsInfo.shared_fs "
            "is None)"
        )
        hv.sources.append(("shared_fs", Origin("default", value=default, note=why)))
        return default
    value: str = _typed(hv, "shared_fs", "")
    if hypervisor == "qemu" and value and value not in SHARED_FS[runtime]:
        runtime_name = "Go runtime" if runtime == "go" else "runtime-rs"
        raise ConfigError(
            f"{hv.where('shared_fs')}: {value!r} is not a shared file system Kata's "
            f"{runtime_name} starts a QEMU VM with; expected one of "
            + ", ".join(repr(v) for v in SHARED_FS[runtime])
        )
    if value == "":
        hv.note("shared_fs", '"" is virtio-fs')
        return "virtio-fs"
    return value


def _file_mem_backend(hv: _Reader, table: Mapping[str, Any]) -> str:
    """The Go runtime's ``file_mem_backend`` (Kata before 3.32, which removed it:
    kata-containers 70d8f1bf): a directory that backs the guest's memory, and each
    hot-added DIMM's, with shared files. Absolute, as it names a directory to QEMU, which
    kata-mem talks to as root. "" (the rendered default) sets nothing.

    :raises ConfigError: not a string, or a relative path.
    """
    if "file_mem_backend" not in table:
        return ""
    value: str = hv.get(
        "file_mem_backend",
        "",
        lambda v: is_str(v) and (v == "" or _absolute_path(v)),
        'an absolute path without NUL (a directory), or "" for none',
    )
    return value


#: Keys of ``[runtime]`` that only runtime-rs has (kata-types config/runtime.rs
#: ``Runtime``: ``name`` "virt_container", ``hypervisor_name``, ``agent_name``); the Go
#: runtime's ``runtime`` struct (src/runtime/pkg/katautils/config.go) has none of them.
RUNTIME_RS_KEYS = ("name", "hypervisor_name", "agent_name")
#: The hypervisors only runtime-rs drives.
RUNTIME_RS_HYPERVISORS = ("dragonball", "openvmm")
#: The [hypervisor.NAME] tables each runtime reads, and refuses any other: Go katautils/
#: config.go ``updateRuntimeConfigHypervisor`` ("configuration file contains invalid
#: hypervisor section"); runtime-rs, the plugins kata-types registers
#: (config/hypervisor/: ``HYPERVISOR_NAME_*``).
HYPERVISORS: dict[Runtime, tuple[str, ...]] = {
    "go": ("clh", "dragonball", "firecracker", "qemu", "remote", "stratovirt"),
    "runtime-rs": ("clh", "dragonball", "firecracker", "openvmm", "qemu", "remote"),
}


def which_runtime(
    path: Path, runtime_table: Mapping[str, Any], hypervisor: str, hv_table: Mapping[str, Any]
) -> tuple[Runtime, str]:
    """The Kata runtime a configuration is for, and what shows it, where ``[kata_mem]
    runtime`` does not say. runtime-rs installs its own files, in a ``runtime-rs``
    directory of Kata's defaults (src/runtime-rs/Makefile ``CONFDIR``; kata-deploy copies
    them per shim under ``runtime-rs/runtimes/SHIM``), named ``*-runtime-rs.toml`` for
    the hypervisors both runtimes drive, and writes keys the Go runtime does not have.
    A configuration that shows neither is the Go runtime's, Kata's default.

    The path is checked as given and resolved: ``/etc/kata-containers/configuration.toml``
    is often a link to a packaged file.
    """
    for shown in dict.fromkeys((str(path), os.path.realpath(path))):
        at = Path(shown)
        if "runtime-rs" in at.parent.parts or at.name.endswith("-runtime-rs.toml"):
            return "runtime-rs", f"inferred: {shown} is one of runtime-rs's configuration files"
    for key in RUNTIME_RS_KEYS:
        if key in runtime_table:
            return "runtime-rs", f"inferred: [runtime] {key} is a key only runtime-rs reads"
    if hypervisor in RUNTIME_RS_HYPERVISORS:
        return "runtime-rs", f"inferred: [hypervisor.{hypervisor}] only runtime-rs drives it"
    for key in ("overhead_vcpus", "overhead_memory"):
        if key in hv_table:
            return "runtime-rs", f"inferred: [hypervisor.{hypervisor}] {key} only runtime-rs reads"
    return "go", (
        "inferred: nothing in the configuration is runtime-rs's (Kata's default runtime); "
        'set [kata_mem] runtime = "runtime-rs" if it is'
    )


def _absolute_path(v: Any) -> bool:
    return is_str(v) and v.startswith("/") and "\0" not in v


def _power_of_two_mib(v: Any) -> bool:
    return is_int(v) and v >= 1 and v & (v - 1) == 0


def _percent(v: Any) -> bool:
    return is_int(v) and 0 <= v <= 100


def _positive_number(v: Any) -> bool:
    return is_number(v) and v > 0


def _mib(v: Any) -> bool:
    # Kept below INT64_MAX bytes once scaled, as every size kata-mem hands on.
    return is_int(v) and 0 <= v <= to_mib_floor(INT64_MAX)


#: What :func:`_mib` takes, both bounds said.
_MIB_RANGE = f"an integer from 0 to {to_mib_floor(INT64_MAX)} (MiB; 8 EiB of bytes)"


#: The range of ``step_timeout_s`` (seconds).
STEP_TIMEOUT_MIN_S = 0.1
STEP_TIMEOUT_MAX_S = 3600

#: The longest balloon statistics interval both hypervisors take (libvirt's ``int``).
STATS_INTERVAL_MAX = (1 << 31) - 1

#: The ``[kata_mem]`` table: key -> (Settings field, scale, check, expected).
SETTINGS_KEYS: dict[str, tuple[str, int, Callable[[Any], bool], str]] = {
    "dimm_block_mib": ("dimm_block", MiB, _power_of_two_mib, "a power of two (MiB), e.g. 128"),
    "virtio_mem_block_mib": (
        "virtio_mem_block",
        MiB,
        _power_of_two_mib,
        "a power of two (MiB), e.g. 2",
    ),
    "headroom_min_mib": ("headroom_min", MiB, _nonneg_int, "a non-negative integer (MiB)"),
    "headroom_percent": ("headroom_percent", 1, _percent, "an integer from 0 to 100"),
    "shrink_step_min_mib": ("shrink_step_min", MiB, _nonneg_int, "a non-negative integer (MiB)"),
    "shrink_step_percent": ("shrink_step_percent", 1, _percent, "an integer from 0 to 100"),
    # Below a tenth of a second no hypervisor reports a step done (every step would time
    # out); above an hour a step holds the sandbox's lock, and the shim, longer than any
    # caller waits, and a timer may not take it at all.
    "step_timeout_s": (
        "step_timeout_s",
        1,
        lambda v: is_number(v) and STEP_TIMEOUT_MIN_S <= v <= STEP_TIMEOUT_MAX_S,
        f"a number of seconds from {STEP_TIMEOUT_MIN_S} to {STEP_TIMEOUT_MAX_S}",
    ),
    "usage_max_age_s": ("usage_max_age_s", 1, _positive_number, "a positive number of seconds"),
    # Set on the guest's balloon: QEMU refuses more than UINT32_MAX seconds ("timer value
    # is too big", hw/virtio/virtio-balloon.c balloon_stats_set_poll_interval), libvirt
    # takes a C int (virDomainSetMemoryStatsPeriod).
    "stats_interval_s": (
        "stats_interval_s",
        1,
        lambda v: is_int(v) and 1 <= v <= STATS_INTERVAL_MAX,
        f"an integer from 1 to {STATS_INTERVAL_MAX} (seconds; libvirt's and QEMU's range)",
    ),
    "allow_shrink": ("allow_shrink", 1, is_bool, "true or false"),
    # Absolute: reconcile, serve and the shim run from other directories than the one a
    # relative path was written for. No NUL: no path the kernel takes has one.
    "state_dir": ("state_dir", 1, _absolute_path, "an absolute path without NUL"),
    "host_memory_cgroup": (
        "host_memory_cgroup",
        1,
        lambda v: v == "" or _absolute_path(v),
        'an absolute path without NUL (a memory cgroup directory), or "" for none',
    ),
    "hugepages_path": (
        "hugepages_path",
        1,
        _absolute_path,
        "an absolute path without NUL (a hugetlbfs mount)",
    ),
    "sizing": (
        "sizing",
        1,
        lambda v: v in SIZING_MODELS,
        " or ".join(f'"{m}"' for m in SIZING_MODELS),
    ),
    "pod_overhead_mib": ("pod_overhead", MiB, _mib, _MIB_RANGE),
    "vmm_overhead_mib": ("vmm_overhead", MiB, _mib, _MIB_RANGE),
    "vmm_overhead_per_gib_mib": (
        "vmm_overhead_per_gib",
        MiB,
        lambda v: is_int(v) and 0 <= v <= 1024,
        "an integer from 0 to 1024 (MiB per GiB of guest memory)",
    ),
    "host_cgroup_margin_mib": ("host_cgroup_margin", MiB, _mib, _MIB_RANGE),
    "host_cgroup_guard": (
        "host_cgroup_guard",
        1,
        lambda v: v in ("on", "off"),
        '"on" (hold a grow while the VMM\'s cgroup cannot be seen) or "off" (no guard)',
    ),
    "node_reserved_mib": ("node_reserved", MiB, _mib, _MIB_RANGE),
    "runtime": (
        "runtime",
        1,
        lambda v: v in RUNTIMES,
        " or ".join(f'"{r}"' for r in RUNTIMES) + " (absent: inferred from the configuration)",
    ),
    "node_overcommit": (
        "node_overcommit",
        1,
        lambda v: is_number(v) and 0 < v <= 100,
        "a ratio above 0 and at most 100, e.g. 1.0 (absent: report only)",
    ),
    # Read when kernel_params does not say (memhp_default_state); absent: as Kata's guest
    # onlines (a kernel zone, kata_mem.core.guestmem.KATA_ONLINING).
    "guest_onlining": (
        "guest_onlining",
        1,
        lambda v: v in ONLININGS,
        " or ".join(f'"{o}"' for o in ONLININGS) + " (absent: as Kata's guest, a kernel zone)",
    ),
    "guest_memmap_on_memory": ("guest_memmap_on_memory", 1, is_bool, "true or false"),
}


def load_settings(
    data: Mapping[str, Any], origins: Origins, first: str
) -> tuple[Settings, list[tuple[str, Origin]]]:
    """kata-mem's own ``[kata_mem]`` table; unknown keys are errors (it is our table)."""
    table = data.get("kata_mem", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{origins.get(('kata_mem',), first)}: [kata_mem] must be a table")
    reader = _Reader(table, ("kata_mem",), origins, first)
    unknown = sorted(set(table) - set(SETTINGS_KEYS))
    if unknown:
        raise ConfigError(
            f"{reader.where(unknown[0])}: unknown kata-mem setting; expected one of "
            + ", ".join(sorted(SETTINGS_KEYS))
        )
    defaults = Settings()
    values: dict[str, Any] = {}
    for key, (attr, scale, check, expected) in SETTINGS_KEYS.items():
        default = getattr(defaults, attr)
        shown = default // scale if scale > 1 and default is not None else default
        raw = reader.get(key, shown, check, expected)
        if raw is None:
            values[attr] = None  # an optional setting left out
        elif attr == "node_overcommit":
            values[attr] = Fraction(str(raw))  # exact: 1.1 is 11/10, not a binary float
        else:
            values[attr] = raw * scale if scale > 1 else raw
    assert set(fields(Settings)) == set(values)
    if values["stats_interval_s"] >= values["usage_max_age_s"]:
        # A reading is then as old as usage_max_age_s or older between two reports, and
        # unknown: every shrink would defer, or wait up to three intervals for a fresh one.
        raise ConfigError(
            f"{reader.where('stats_interval_s')}: {values['stats_interval_s']} is not below "
            f"[kata_mem] usage_max_age_s ({toml_value(values['usage_max_age_s'])}): the guest "
            "reports its usage every stats_interval_s seconds and a reading older than "
            "usage_max_age_s is unknown; expected stats_interval_s below usage_max_age_s"
        )
    if values["shrink_step_min"] == 0 and values["shrink_step_percent"] == 0:
        # A step of nothing: the planner would fall back to one block (2 MiB of virtio-mem),
        # a thousand verified steps for a 2 GiB shrink.
        raise ConfigError(
            f"{reader.where('shrink_step_min_mib')}: 0 with [kata_mem] shrink_step_percent 0 "
            "makes shrink steps of nothing; expected shrink_step_min_mib or "
            "shrink_step_percent above 0"
        )
    return Settings(**values), [(f"kata_mem.{k}", s) for k, s in reader.sources]


def env() -> Mapping[str, str]:
    """The process environment (an edge, kept here so the core never reads it)."""
    return os.environ
