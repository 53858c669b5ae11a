"""Bad values and wrong results, as a user meets them: host memory
that is not whole MiB, containers and keys given twice, hugepage sizes no architecture
has, configuration paths kata-mem cannot use, empty option values, a closed stdout, a
host override next to a configured cgroup, messages that named the wrong thing, and
shell completion.

Each test drives the command line or the shim as a user does (in-process through
``kata_mem.interfaces.main``, or a real process where a pipe, bytes or stdin matter) and failed on
the code before the fix it pins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest

from kata_mem.core.units import GiB, MiB
from kata_mem.interfaces.cli import cli
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS, write_config
from tests.support.memcg import CgroupUnavailable, MemoryCgroup
from tests.support.paths import KATA_CONFIGS, REPO
from tests.support.shim import REQUEST_SCHEMA, shim_request_doc

Run = Callable[..., CliResult]
HOST = ("--host-cpus", "4", "--host-arch", "amd64")  # HOST_ARGS without the memory
UPSTREAM_QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})


def _shim(doc: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    r = kata_mem_process("shim", input=json.dumps(doc), timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, out, r.stderr


def _error(r: CliResult, code: int, *needles: str) -> str:
    assert r.code == code, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err
    for needle in needles:
        assert needle in r.err, r.err
    return r.err


# --- 1. Host memory is whole MiB, given or probed; a plan never exceeds its max ------------


def test_a_host_memory_of_part_of_a_mib_is_floored_as_memtotal_is(run_cli: Run, cfg: Path) -> None:
    # Before: host 2000.5 MiB, boot memory min(2048, host) = 2000.5 MiB, shown as max 2000
    # and target 2001 (rounded up), and the texts in bytes: "2097676288 B".
    args = ("preview", "--config", str(cfg), "--host-memory", "2000.5Mi", *HOST, "--limit", "1Mi")
    r = run_cli(*args, "--json")
    assert r.code == 0, r.err
    memory = json.loads(r.out)["memory"]
    assert (memory["host_mib"], memory["max_mib"], memory["base_mib"]) == (2000, 2000, 2000)
    assert memory["target_mib"] == 2000 <= memory["max_mib"]
    text = run_cli(*args).out
    assert "clamped to 2000 MiB by the host's MemTotal" in text
    assert "a VM boots with at most 2000 MiB" in text
    assert " B " not in text and " B:" not in text and not text.rstrip().endswith(" B"), text


def test_the_shim_floors_host_memory_bytes_too(cfg: Path) -> None:
    half = 24105 * MiB + MiB // 2
    doc = shim_request_doc(cfg, containers=[{"id": "c1", "memory_limit_bytes": 100 * GiB}])
    doc["host"] = {"memory_bytes": half, "cpus": 4}
    code, out, err = _shim(doc)
    assert code == 0, err
    memory = out["plan"]["memory"]
    assert (memory["host_mib"], memory["max_mib"], memory["target_mib"]) == (24105, 24105, 24064)
    details = " ".join(c["detail"] for c in memory["clamps"])
    assert "clamped to 24105 MiB by the host's MemTotal" in details
    assert "cross the maximum 24105 MiB" in details and " B" not in details


# --- 2. Each container once, each key once -------------------------------------------------


def test_a_container_id_given_twice_is_refused(cfg: Path) -> None:
    # Before: [c1, c1] of 256 MiB each planned 2048 + 512 = 2560 instead of 2304.
    c1 = {"id": "c1", "memory_limit_bytes": 256 * MiB}
    code, out, _ = _shim(shim_request_doc(cfg, containers=[c1, c1]))
    assert code == 4 and out["error"]["kind"] == "input"
    assert (
        'request containers[1]: container id "c1" is also that of request containers[0]'
        in (out["error"]["message"])
    )


def test_the_same_oci_spec_twice_on_a_command_line_is_refused(run_cli: Run, tmp_path: Path) -> None:
    spec = tmp_path / "c1" / "config.json"
    spec.parent.mkdir()
    spec.write_text(json.dumps({"linux": {"resources": {"memory": {"limit": 256 * MiB}}}}))
    r = run_cli("preview", "--config", str(write_config(tmp_path / "c.toml")), *HOST_ARGS,
                "--oci", str(spec), "--oci", str(spec))  # fmt: skip
    _error(r, 4, f'{spec}: container id "c1" is also that of {spec}')


def test_two_specs_of_one_folder_are_two_containers(run_cli: Run, tmp_path: Path) -> None:
    """A file that is not a bundle's config.json is a container of its
    own (it was named by its folder, so a second one was refused as the first given twice)."""
    for name in ("a.json", "b.json"):
        doc = {"linux": {"resources": {"memory": {"limit": 256 * MiB}}}}
        (tmp_path / name).write_text(json.dumps(doc))
    r = run_cli("preview", "--config", str(write_config(tmp_path / "c.toml")), *HOST_ARGS,
                "--json", "--oci", str(tmp_path / "a.json"), "--oci", str(tmp_path / "b.json"))  # fmt: skip
    assert r.code == 0, r.err
    assert json.loads(r.out)["memory"]["requested_mib"] == 2048 + 512
    again = run_cli("preview", "--config", str(write_config(tmp_path / "c.toml")), *HOST_ARGS,
                    "--oci", str(tmp_path / "a.json"), "--oci", str(tmp_path / "a.json"))  # fmt: skip
    _error(again, 4, f"{tmp_path / 'a.json'}: container id", "expected each container once")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "kind: Pod\nspec:\n  containers:\n  - name: a\n    resources:\n      limits:\n"
            "        memory: 1Gi\n        memory: 2Gi\n",
            'line 8: the key "memory" is given more than once in one mapping (first on line 7)',
        ),
        (
            "kind: Pod\nkind: Pod\nspec: {containers: [{name: a}]}\n",
            'line 2: the key "kind" is given more than once in one mapping (first on line 1)',
        ),
        (
            '{"kind": "Pod", "spec": {"containers": [{"name": "a", "resources": {"limits": '
            '{"memory": "1Gi", "memory": "2Gi"}}}]}}',
            'spec.containers[0].resources.limits.memory: the key "memory" is given more than once',
        ),
    ],
    ids=["yaml-limits", "yaml-top", "json"],
)
def test_a_key_given_twice_in_a_pod_is_refused(
    run_cli: Run, cfg: Path, tmp_path: Path, text: str, where: str
) -> None:
    # Before: the last value was kept in silence (2Gi).
    pod = tmp_path / "pod.yaml"
    pod.write_text(text)
    _error(run_cli("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS), 4, where)


def test_a_merge_may_still_be_overridden(run_cli: Run, cfg: Path, tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nx-limits: &l {memory: 1Gi}\nspec:\n  containers:\n  - name: a\n"
        "    resources:\n      limits:\n        <<: *l\n        memory: 2Gi\n"
    )
    r = run_cli("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["memory"]["requested_mib"] == 2048 + 2048


def test_a_container_name_given_twice_in_a_pod_is_refused(
    run_cli: Run, cfg: Path, tmp_path: Path
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nspec:\n  initContainers:\n  - {name: a, resources: {limits: {memory: 1Gi}}}\n"
        "  containers:\n  - {name: a, resources: {limits: {memory: 1Gi}}}\n"
    )
    _error(
        run_cli("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS),
        4,
        f"{pod}: spec.containers[0].name: 'a' is also the name of spec.initContainers[0]",
    )


def test_a_key_given_twice_in_an_oci_spec_is_refused(
    run_cli: Run, cfg: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "config.json"
    spec.write_text('{"linux": {"resources": {"memory": {"limit": 1, "limit": 2147483648}}}}')
    _error(
        run_cli("preview", "--config", str(cfg), "--oci", str(spec), *HOST_ARGS),
        4,
        f'{spec}: linux.resources.memory.limit: the key "limit" is given more than once',
    )


# --- 3. Path-valued settings: absolute, without NUL ----------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("state_dir", "/tmp/a\0b", "expected an absolute path without NUL, got '/tmp/a\\x00b'"),
        ("state_dir", "state", "expected an absolute path without NUL, got 'state'"),
        ("host_memory_cgroup", "/sys/fs/cgroup\0x", "expected an absolute path without NUL"),
        ("host_memory_cgroup", "kubepods", "expected an absolute path without NUL (a memory"),
        (
            "hugepages_path",
            "/dev/huge\0pages",
            "expected an absolute path without NUL (a hugetlbfs",
        ),
    ],
)
def test_a_path_setting_kata_mem_cannot_use_is_a_configuration_error(
    run_cli: Run, tmp_path: Path, key: str, value: str, expected: str
) -> None:
    # Before: config check said 0 for a NUL, and apply and status --all failed with
    # "internal error: ValueError: embedded null byte" (exit 1).
    toml_value = json.dumps(value)  # a TOML basic string: \u0000 for the NUL
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[hypervisor.qemu]\n[kata_mem]\n{key} = {toml_value}\n")
    where = f"{cfg}: [kata_mem] {key}: {expected}"
    _error(run_cli("config", "check", str(cfg)), 3, where)
    _error(run_cli("apply", "--config", str(cfg), "--dry-run", *HOST_ARGS), 3, where)
    _error(run_cli("status", "--all", "--config", str(cfg)), 3, where)


def test_the_empty_host_memory_cgroup_still_means_none(run_cli: Run, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", kata_mem={"host_memory_cgroup": ""})
    assert run_cli("config", "check", str(cfg)).code == 0


# --- 4. An empty option value is a usage error ---------------------------------------------


def _value_options() -> Iterator[tuple[list[str], str]]:
    """Every option of every command that takes a value, and every argument."""

    def walk(command: click.Command, words: list[str]) -> Iterator[tuple[list[str], str]]:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, [*words, name])
            return
        for param in command.params:
            if isinstance(param, click.Argument):
                yield words, ""
            elif not (isinstance(param, click.Option) and (param.is_flag or param.count)):
                assert isinstance(param, click.Option)
                yield words, max(param.opts, key=len)

    yield from walk(cli, [])


VALUE_OPTIONS = list(_value_options())


def test_the_scan_finds_the_options_of_the_issue() -> None:
    found = {(" ".join(words), opt) for words, opt in VALUE_OPTIONS}
    for named in [("serve", "--socket"), ("apply", "--state-dir"), ("preview", "--config"),
                  ("preview", "--host-cgroup"), ("host", "--cgroup"), ("config check", "")]:  # fmt: skip
        assert named in found


@pytest.mark.parametrize(
    ("words", "option"), VALUE_OPTIONS, ids=[" ".join([*w, o]) for w, o in VALUE_OPTIONS]
)
def test_an_empty_value_is_a_usage_error_naming_the_option(
    run_cli: Run, words: list[str], option: str
) -> None:
    # Before: serve --socket "" bound the default socket, --state-dir "", --config "",
    # --host-cgroup "" and host --cgroup "" meant their defaults.
    r = run_cli(*words, *([option, ""] if option else [""]))
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    # click's words ("Invalid value for '--socket'"), or the shim's own (it runs before click).
    assert (option or "Invalid value for '[FILE]'") in r.err, r.err


# --- 5. A closed stdout ------------------------------------------------------------------


#: stdout or stderr, as a caller may hand it over: a pipe whose reader has gone (``| true``),
#: closed (``>&-``), a full disk (``>/dev/full``), or a descriptor open for reading only
#: (``1<&0``: EBADF on write, which is no reader gone).
BROKEN = ("pipe", "closed", "full", "read-only")


def _stdio(how: str, fd: int) -> tuple[Any, Any]:
    """What to pass subprocess for descriptor ``fd`` broken as ``how``, and a preexec_fn."""
    if how == "closed":
        return subprocess.DEVNULL, lambda: os.close(fd)
    if how == "full":
        return open("/dev/full", "wb"), None
    if how == "read-only":
        return open(os.devnull, "rb"), None
    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first byte is written
    return os.fdopen(write, "wb"), None


@pytest.mark.parametrize("how", BROKEN)
@pytest.mark.parametrize(
    "args",
    [
        ["shim"],
        ["shim", "-h"],
        ["shim", "--print-schema", "request"],
        ["--help"],
        ["preview", "--help"],
        ["preview", "--config", "CFG", *HOST_ARGS],
        ["preview", "--config", "CFG", *HOST_ARGS, "--json"],
        ["preview", "--config", "/nonexistent/c.toml", *HOST_ARGS, "--json"],  # an error document
    ],
    ids=lambda a: " ".join(a).replace("CFG", "cfg"),
)
def test_a_stdout_that_takes_no_result_is_no_bug(cfg: Path, args: list[str], how: str) -> None:
    # Before: the shim printed a BrokenPipeError traceback (exit 1); click's commands
    # exited 1, which is kata-mem's "internal error". With >&- the shim and --print-schema
    # printed an AttributeError traceback, and the click commands exited 0, the result lost
    # without a word; with >/dev/full the shim printed an OSError traceback and the others
    # called a full disk "a bug in kata-mem".
    argv = [str(cfg) if a == "CFG" else a for a in args]
    stdout, preexec = _stdio(how, 1)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kata_mem", *argv],
            input=json.dumps(shim_request_doc(cfg)).encode(),
            stdout=stdout,
            stderr=subprocess.PIPE,
            preexec_fn=preexec,
            cwd=REPO,
            timeout=60,
            check=False,
        )
    finally:
        if stdout is not subprocess.DEVNULL:
            stdout.close()
    err = r.stderr.decode()
    assert "Traceback" not in err and "Exception" not in err and "bug" not in err, err
    if how in ("full", "read-only"):  # it cannot take bytes: one line, 74 (EX_IOERR)
        # Before, for read-only: 141 without a word, as if nobody read stdout.
        cause = "No space left on device" if how == "full" else "Bad file descriptor"
        assert r.returncode == 74, err
        assert err.endswith(
            f"error: stdout: the result could not be written ({cause}): what "
            "the command did stands, only its report is lost\n"
        ), err
    else:  # nobody reads it: quiet, 141 as for SIGPIPE
        assert r.returncode == 141, err
        assert "Error" not in err and "stdout" not in err, err


#: A state directory that is not kata-mem's (exit 3), for an error document.
FOREIGN = ("--json", "--state-dir", "FOREIGN")


@pytest.mark.parametrize("how", BROKEN)
@pytest.mark.parametrize(
    ("args", "stdin", "code"),
    [
        (["shim"], "bad", 4),
        (["shim"], "REQUEST", 0),
        (["preview", "--config", "/nonexistent/c.toml", "--json"], "", 3),
        (["apply", "--config", "CFG", "--qmp", "/nonexistent.sock", *FOREIGN], "", 3),
    ],
    ids=["shim-refused", "shim-answered", "preview-error-document", "apply-error-document"],
)
def test_a_stderr_that_takes_no_line_changes_neither_answer_nor_exit_code(
    cfg: Path, tmp_path: Path, args: list[str], stdin: str, code: int, how: str
) -> None:
    # Before: logs.emit wrote on stderr before the error document went to stdout, unguarded:
    # every refusal exited 1 with nothing on stdout.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "someone-elses").write_text("")  # not empty, no marker: not kata-mem's
    argv = [{"CFG": str(cfg), "FOREIGN": str(foreign)}.get(a, a) for a in args]
    stderr, preexec = _stdio(how, 2)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kata_mem", *argv],
            input=json.dumps(shim_request_doc(cfg)) if stdin == "REQUEST" else stdin,
            stdout=subprocess.PIPE,
            stderr=stderr,
            preexec_fn=preexec,
            text=True,
            cwd=REPO,
            timeout=60,
            check=False,
        )
    finally:
        if stderr is not subprocess.DEVNULL:
            stderr.close()
    doc = json.loads(r.stdout)
    assert r.returncode == code, r.stdout
    assert doc["error"]["exit_code"] == code if code else doc["plan"] is not None, doc


def test_a_broken_pipe_elsewhere_is_still_a_bug(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a closed stdout is quiet: a BrokenPipeError with stdout open is reported."""
    import kata_mem.interfaces.cli_plan as cli_mod

    def broken(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli_mod, "probe", broken)
    r = run_cli("host")
    assert r.code == 1 and "internal error: BrokenPipeError" in r.err, r.err


# --- 6. Hugepage sizes the architecture has --------------------------------------------


def _pod(tmp_path: Path, key: str, pages: str = "64Mi") -> Path:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nspec:\n  containers:\n  - name: a\n    resources:\n      limits:\n"
        f"        memory: 1Gi\n        {key}: {pages}\n"
    )
    return pod


@pytest.mark.parametrize(
    ("key", "arch", "message"),
    [
        (
            "hugepages-3Mi",
            "amd64",
            "page size 3Mi is not a hugepage size of amd64; expected 2Mi or 1Gi",
        ),
        ("hugepages-64Ki", "x86_64", "page size 64Ki is not a hugepage size of amd64"),
        ("hugepages-", "amd64", "'' is not a page size; expected hugepages-<size>"),
        ("hugepages-2Q", "amd64", "'2Q' is not a page size"),
        (
            "hugepages-16Mi",
            "s390x",
            "page size 16Mi is not a hugepage size of s390x; expected 1Mi or 2Gi",
        ),
    ],
)
def test_a_pod_hugepage_size_the_architecture_lacks_is_refused(
    run_cli: Run, cfg: Path, tmp_path: Path, key: str, arch: str, message: str
) -> None:
    # Before: any hugepages-* limit counted as hugepage memory.
    pod = _pod(tmp_path, key)
    args = ("--host-memory", "16Gi", "--host-cpus", "4", "--host-arch", arch)
    r = run_cli("preview", "--config", str(cfg), "--pod", str(pod), *args)
    _error(r, 4, f"{pod}: spec.containers[0].resources.limits.{key}: {message}")


# A whole number of pages of each size (Kubernetes refuses any other: validation.go
# validateResourceQuantityHugePageValue).
@pytest.mark.parametrize(("key", "arch", "pages", "mib"), [("hugepages-64Ki", "arm64", "64Mi", 64),
                                                           ("hugepages-2048Ki", "amd64", "64Mi", 64),
                                                           ("hugepages-16Gi", "ppc64le", "16Gi", 16384),
                                                           ("hugepages-1Mi", "s390x", "64Mi", 64)])  # fmt: skip
def test_a_pod_hugepage_size_of_the_architecture_counts(
    run_cli: Run, cfg: Path, tmp_path: Path, key: str, arch: str, pages: str, mib: int
) -> None:
    args = ("--host-memory", "32Gi", "--host-cpus", "4", "--host-arch", arch, "--json")
    pod = _pod(tmp_path, key, pages)
    r = run_cli("preview", "--config", str(cfg), "--pod", str(pod), *args)
    assert r.code == 0, r.err
    assert json.loads(r.out)["memory"]["requested_mib"] == 2048 + 1024 + mib


def test_the_probed_architecture_decides_too(run_cli: Run, cfg: Path, tmp_path: Path) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("written for an x86_64 host")
    r = run_cli("preview", "--config", str(cfg), "--pod", str(_pod(tmp_path, "hugepages-32Mi")),
                "--host-memory", "16Gi", "--host-cpus", "4")  # fmt: skip
    _error(r, 4, "page size 32Mi is not a hugepage size of amd64")


def test_an_oci_page_size_the_architecture_lacks_is_refused(
    run_cli: Run, cfg: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "config.json"
    pages = [{"pageSize": "2MB", "limit": 2 * MiB}, {"pageSize": "3MB", "limit": 3 * MiB}]
    spec.write_text(json.dumps({"linux": {"resources": {"hugepageLimits": pages}}}))
    r = run_cli("preview", "--config", str(cfg), "--oci", str(spec), *HOST_ARGS)
    _error(r, 4, "linux.resources.hugepageLimits[1].pageSize: expected a hugepage size of amd64: "
                 "2MB or 1GB, got '3MB'")  # fmt: skip


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (
            {"arch": "amd64"},
            "request host.hugepages: page size 3Mi is not a hugepage size of amd64",
        ),
        (
            {"arch": "arm64", "size_bytes": 16 * MiB},
            "page size 16Mi is not a hugepage size of arm64",
        ),
        ({}, "request host.hugepages: page size 3Mi is not a hugepage size of any architecture"),
    ],
)
def test_a_shim_hugepage_size_the_architecture_lacks_is_refused(
    cfg: Path, host: dict[str, Any], message: str
) -> None:
    pages = {"count": 512, "size_bytes": host.pop("size_bytes", 3 * MiB)}
    doc = shim_request_doc(cfg)
    doc["host"] = {"memory_bytes": 16 * GiB, "cpus": 4, **host, "hugepages": pages}
    code, out, _ = _shim(doc)
    assert code == 4 and message in out["error"]["message"], out


def test_a_shim_hugepage_size_of_another_architecture_than_this_one_is_refused(cfg: Path) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("written for an x86_64 host")
    doc = shim_request_doc(cfg)
    doc["host"] = {
        "memory_bytes": 16 * GiB,
        "cpus": 4,
        "hugepages": {"count": 4, "size_bytes": 16 * MiB},
    }
    code, out, _ = _shim(doc)  # 16Mi is ppc64le's: not this machine's
    assert code == 4 and "page size 16Mi is not a hugepage size of amd64" in out["error"]["message"]


# --- 7. A given host memory replaces the probe, the configured cgroup cap included ----------


@pytest.fixture
def capped(tmp_path: Path) -> Path:
    """A configuration whose [kata_mem] host_memory_cgroup caps host memory at 3 GiB."""
    cgroup = tmp_path / "cg" / "kubepods"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max").write_text(f"{3 * GiB}\n")
    (cgroup / "memory.current").write_text("0\n")
    return write_config(tmp_path / "c.toml", kata_mem={"host_memory_cgroup": str(cgroup)})


def test_a_given_host_memory_is_not_capped_by_the_configured_cgroup(
    run_cli: Run, capped: Path
) -> None:
    # Before: clamped to 3072 MiB (host_cgroup) although the host was given as 16 GiB.
    args = ("preview", "--config", str(capped), "--limit", "8Gi", "--json")
    r = run_cli(*args, *HOST_ARGS)
    assert r.code == 0, r.err
    memory = json.loads(r.out)["memory"]
    assert (memory["host_mib"], memory["target_mib"], memory["clamped_by"]) == (16384, 10240, [])
    # Probed memory keeps the cap, whatever else is given.
    r = run_cli(*args, *HOST)
    assert r.code == 0 and json.loads(r.out)["memory"]["clamped_by"][:1] == ["host_cgroup"], r.err


def test_a_plan_for_a_given_host_reproduces_where_the_cgroup_does_not_exist(
    run_cli: Run, tmp_path: Path
) -> None:
    # Before: "... host_memory_cgroup '/sys/fs/cgroup/elsewhere': does not exist" (exit 3).
    cfg = write_config(tmp_path / "c.toml", kata_mem={"host_memory_cgroup": str(tmp_path / "gone")})
    r = run_cli("preview", "--config", str(cfg), "--limit", "1Gi", *HOST_ARGS, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["memory"]["target_mib"] == 3072
    doc = shim_request_doc(cfg)
    code, out, err = _shim(doc)
    assert code == 0 and out["plan"]["memory"]["target_mib"] == 3072, err


# --- 8. Messages that say what happened, in the user's terms ------------------------------


def test_host_cgroup_names_the_limit_that_binds_on_a_real_cgroup(run_cli: Run) -> None:
    # Before, on a v1 child whose limit is on its parent: "child/memory.max".
    try:
        parent = MemoryCgroup.create("kmtest-host")
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    with parent:
        parent.set_limit(900 * MiB)
        child = parent.path / "child"
        child.mkdir()
        try:
            r = run_cli("host", "--cgroup", str(child), "--json")
        finally:
            child.rmdir()
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    limit_file = "memory.limit_in_bytes" if parent.version == 1 else "memory.max"
    assert doc["cgroup_memory_limit_mib"] == 900
    source = doc["sources"]["cgroup_memory_limit"]
    assert f"{parent.path}/{limit_file}" in source and f"{child}/" not in source, source
    assert f"cgroup v{parent.version} {limit_file} from {child} up to the root" in source


def test_a_usage_file_that_is_not_a_number_is_a_warning(
    run_cli: Run, cfg: Path, tmp_path: Path
) -> None:
    # Before: usage_mib null and nothing said why.
    cgroup = tmp_path / "pod"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text(f"{8 * GiB}\n")
    (cgroup / "memory.current").write_text("lots\n")
    r = run_cli("preview", "--config", str(cfg), "--limit", "1Gi", *HOST_ARGS,
                "--host-cgroup", str(cgroup), "--json")  # fmt: skip
    assert r.code == 0, r.err
    plan = json.loads(r.out)
    assert plan["memory"]["host_cgroup"]["usage_mib"] is None
    assert any(
        f"host cgroup usage unknown: {cgroup}/memory.current holds 'lots', not a number of bytes"
        in w
        for w in plan["warnings"]
    ), plan["warnings"]


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"stats_interval_s": 4294967296}, "stats_interval_s"),
        ({"stats_interval_s": 6, "usage_max_age_s": 6}, "stats_interval_s"),
        # A step timeout no hypervisor step meets (every shrink: UnplugTimeout), or
        # one no timer takes; shrink steps of nothing (one block at a time).
        ({"step_timeout_s": 1e-300}, "step_timeout_s"),
        ({"step_timeout_s": 0.05}, "step_timeout_s"),
        ({"step_timeout_s": 1e300}, "step_timeout_s"),
        ({"shrink_step_min_mib": 0, "shrink_step_percent": 0}, "shrink_step_min_mib"),
    ],
)
def test_a_setting_the_hypervisor_cannot_use_is_refused_by_config_check(
    run_cli: Run, tmp_path: Path, settings: dict[str, Any], key: str
) -> None:
    # Before: config check exit 0, then every apply failed with QMP's "timer value is too
    # big" (exit 7), or every shrink waited for statistics that are never fresh.
    cfg = write_config(tmp_path / "c.toml", kata_mem=settings)
    for args in (("config", "check", str(cfg)), ("preview", "--config", str(cfg), *HOST_ARGS)):
        r = run_cli(*args)
        assert r.code == 3 and f"{cfg}: [kata_mem] {key}: " in r.err, r.err


def test_config_check_says_what_unset_means(run_cli: Run, cfg: Path) -> None:
    r = run_cli("config", "check", str(cfg))
    assert r.code == 0 and "None" not in r.out, r.out
    assert (
        "node_overcommit                unset (the node's total is reported, never enforced)"
        in r.out
    )
    assert "pod_overhead_mib               unset (only the Pod or its annotation" in r.out
    assert 'host_memory_cgroup             "" (none: host memory is MemTotal alone)' in r.out


def test_a_shim_integer_of_thousands_of_digits_gets_a_range_message(cfg: Path) -> None:
    raw = json.dumps(shim_request_doc(cfg)).replace(str(1 << 30), "9" * 5000)
    r = kata_mem_process("shim", input=raw, timeout=60)
    message = json.loads(r.stdout)["error"]["message"]
    assert r.returncode == 4 and "set_int_max_str_digits" not in message + r.stderr, message
    assert "expected integers of at most 64 bits" in message


def test_a_drop_in_that_adds_a_hypervisor_is_named(run_cli: Run, tmp_path: Path) -> None:
    # Before: "configuration.toml: expected exactly one [hypervisor.NAME] section".
    cfg = write_config(tmp_path / "configuration.toml")
    (tmp_path / "config.d").mkdir()
    dropin = tmp_path / "config.d" / "50-clh.toml"
    dropin.write_text("[hypervisor.clh]\ndefault_memory = 1024\n")
    _error(run_cli("config", "check", str(cfg)), 3,
           f"[hypervisor.clh] (in {dropin}), [hypervisor.qemu] (in {cfg})")  # fmt: skip


@pytest.mark.parametrize(
    "option", ["--limit", "--cpu", "--host-memory", "--current", "--pod", "--oci"]
)
def test_a_value_that_is_not_utf8_is_shown_as_typed(cfg: Path, tmp_path: Path, option: str) -> None:
    # Before: --limit $'\xff' was shown as '\udcff'; --pod and --oci took such a file name
    # (exit 0, the file planned) where every other option refuses it.
    named = os.fsencode(tmp_path) + b"/\xff.json"
    if option in ("--pod", "--oci"):
        pod = {"kind": "Pod", "spec": {"containers": [{"name": "a"}]}}
        Path(os.fsdecode(named)).write_text(json.dumps(pod if option == "--pod" else {}))
    given: dict[bytes, bytes] = {
        b"--host-memory": b"16Gi",
        option.encode(): named if option in ("--pod", "--oci") else b"\xff",
    }
    args = [b"preview", b"--config", os.fsencode(cfg), *map(os.fsencode, HOST)]
    args += [part for pair in given.items() for part in pair]
    r = subprocess.run(
        [sys.executable, b"-m", b"kata_mem", *args],
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    err = r.stderr.decode()
    assert r.returncode == 4 and "udcff" not in err, err
    assert f"{option} {given[option.encode()]!r}: not valid UTF-8" in err, err


def test_pod_overhead_sizing_without_an_overhead_says_it_sized_as_kata(
    run_cli: Run, tmp_path: Path
) -> None:
    cfg = write_config(tmp_path / "c.toml", kata_mem={"sizing": "pod-overhead"})
    r = run_cli("preview", "--config", str(cfg), "--limit", "1Gi", *HOST_ARGS)
    assert r.code == 0, r.err
    (row,) = [line for line in r.out.splitlines() if line.lstrip().startswith("requested")]
    assert "pod overhead + container limits" not in row, row
    assert "base + container limits (no pod overhead known: sized as kata)" in row


# --- 9. Completion -----------------------------------------------------------------------


def _complete(*words: str) -> list[str]:
    r = kata_mem_process(
        env={
            "_KATA_MEM_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(("kata-mem", *words)),
            "COMP_CWORD": str(len(words)),
        },
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_shim_options_and_their_choices_complete() -> None:
    from kata_mem.interfaces.main import SHIM_SCHEMAS

    assert "plain,--print-schema" in _complete("shim", "--")
    assert _complete("shim", "--print-schema", "") == [f"plain,{n}" for n in SHIM_SCHEMAS]


def test_host_arch_completes_the_architecture_names() -> None:
    from kata_mem.core.arch import GO_ARCH

    assert _complete("preview", "--host-arch", "") == [f"plain,{n}" for n in GO_ARCH]
    assert _complete("host", "--host-arch", "a") == ["plain,amd64", "plain,aarch64", "plain,arm64"]


# --- Values named by key and type, overheads that are sizes ---------------------------------

_DEFAULT_MEMORY = "io.katacontainers.config.hypervisor.default_memory"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(1024, "a number, 1024"), (None, "null"), (True, "a boolean, true"), ({}, "an object")],
)
def test_an_annotation_value_that_is_not_a_string_is_named_by_key_and_type(
    cfg: Path, value: Any, shown: str
) -> None:
    # Before: "request annotations: expected an object of strings, got dict".
    code, out, _ = _shim(shim_request_doc(cfg, annotations={_DEFAULT_MEMORY: value}))
    assert code == 4 and out["error"]["kind"] == "input"
    assert out["error"]["message"].endswith(
        f'request annotations["{_DEFAULT_MEMORY}"]: expected a string, got {shown}'
    ), out["error"]["message"]


def _resize_doc(cfg: Path, **fields: Any) -> dict[str, Any]:
    doc = shim_request_doc(
        cfg, event="update-sandbox", sandbox_resources={"memory_limit_bytes": GiB}
    )
    del doc["containers"]
    doc.update(fields)
    return doc


def test_an_update_sandbox_answer_says_the_pods_new_resources_sized_it(cfg: Path) -> None:
    # Before: "sandbox sized from CRI annotations (request sandbox_resources)", no annotation given.
    code, out, _ = _shim(_resize_doc(cfg))
    assert code == 0, out
    texts = list(out["warnings"])
    assert (
        "sandbox sized from the pod's new resources (CRI UpdatePodSandboxResources) "
        "(request sandbox_resources)" in texts
    ), texts
    assert not [t for t in texts if "annotation" in t], texts


@pytest.mark.parametrize("overhead", [-1, -(2**63)])
def test_a_negative_overhead_is_refused(cfg: Path, overhead: int) -> None:
    # Before: accepted as "no overhead"; an overhead is a size, never "none".
    doc = _resize_doc(cfg, overhead={"memory_limit_bytes": overhead})
    with pytest.raises(jsonschema.ValidationError):  # the shipped schema says so too
        jsonschema.validate(doc, REQUEST_SCHEMA)
    code, out, _ = _shim(doc)
    assert code == 4 and out["error"]["kind"] == "input"
    assert (
        "request overhead.memory_limit_bytes: expected an integer from 0"
        in (out["error"]["message"])
    ), out["error"]["message"]


_CONTAINER = "spec:\n  {pod}containers:\n  - name: a\n    resources: {res}\n"


@pytest.mark.parametrize(
    ("pod", "res", "needle"),
    [
        (
            "",
            "{limits: {memory: 1Gi}, requests: {memory: 2Gi}}",
            "spec.containers[0].resources.requests.memory: 2Gi is above "
            "spec.containers[0].resources.limits.memory 1Gi",
        ),
        (
            "resources: {limits: {memory: 512Mi}}\n  ",
            "{limits: {memory: 1Gi}}",
            "spec.containers[0].resources.limits.memory: 1Gi is above the pod's "
            "spec.resources.limits.memory (512Mi)",
        ),
        (
            "resources: {limits: {cpu: 500m}}\n  ",
            '{limits: {cpu: "2"}}',
            "spec.containers[0].resources.limits.cpu: 2 is above the pod's "
            "spec.resources.limits.cpu (500m)",
        ),
        (
            "resources: {limits: {memory: 1Gi}, requests: {memory: 2Gi}}\n  ",
            "{}",
            "spec.resources.requests.memory: 2Gi is above spec.resources.limits.memory 1Gi",
        ),
    ],
)
def test_a_pod_kubernetes_refuses_is_not_sized(
    run_cli: Run, cfg: Path, tmp_path: Path, pod: str, res: str, needle: str
) -> None:
    # Before: planned (1536 MiB for a request above its limit, 1024 for a container above
    # the pod's limit), a Pod the API server never admits.
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n" + _CONTAINER.format(pod=pod, res=res)
    )
    r = run_cli("preview", "--config", str(cfg), "--pod", str(manifest), *HOST_ARGS)
    _error(r, 4, f"{manifest}: {needle}", "as Kubernetes requires")


def test_an_oci_page_size_given_twice_is_refused(run_cli: Run, cfg: Path, tmp_path: Path) -> None:
    # Before: summed (1 GiB + 1 byte: requested 1537 MiB); runc writes the one cgroup file
    # twice, so the last limit (1 byte) is the cgroup's.
    spec = tmp_path / "config.json"
    pages = [{"pageSize": "2MB", "limit": GiB}, {"pageSize": "2MB", "limit": 1}]
    spec.write_text(json.dumps({"linux": {"resources": {"hugepageLimits": pages}}}))
    r = run_cli("preview", "--config", str(cfg), "--oci", str(spec), *HOST_ARGS)
    _error(
        r,
        4,
        f"{spec}: linux.resources.hugepageLimits[1].pageSize: '2MB' is also that of "
        "linux.resources.hugepageLimits[0]; expected each page size once",
    )


@pytest.mark.parametrize(
    "args",
    [
        ("preview", "--limit", "1e400"),
        ("preview", "--limit", "99999999999999Ei"),
        ("runtimeclass", "--max-pod-memory", "1e400"),
    ],
)
def test_a_size_above_int64_on_the_command_line_is_refused(
    run_cli: Run, cfg: Path, args: tuple[str, ...]
) -> None:
    # Before: saturated to 8 EiB - 1 byte and planned ("requested 8796093022720"), where
    # the shim refuses the same size (exit 4).
    host = HOST_ARGS if args[0] == "preview" else ()
    r = run_cli(args[0], "--config", str(cfg), *args[1:], *host)
    _error(r, 4, f"{args[2]!r} is above 9223372036854775807 bytes")


def test_a_crio_annotation_number_no_float_holds_is_shown_as_written(cfg: Path) -> None:
    # Before: "memory_limit_in_bytes Infinity is not a 64-bit integer", a value the
    # annotation never held.
    raw = '{"memory_limit_in_bytes": 1e400}'
    doc = shim_request_doc(
        cfg, containers=[], annotations={"io.kubernetes.cri-o.PodLinuxResources": raw}
    )
    code, out, _ = _shim(doc)
    assert code == 0, out
    assert any(
        "memory_limit_in_bytes 1e400 is not a 64-bit integer" in w for w in out["warnings"]
    ), out["warnings"]
    assert not [w for w in out["warnings"] if "Infinity" in w]


@pytest.mark.parametrize("cpus", ["1e41", "1e100", "1e400", "9223372036854775.808"])
def test_cpus_beyond_int64_millicores_are_refused(run_cli: Run, cfg: Path, cpus: str) -> None:
    # Before: capped at 10^40 and planned, each shown as "containers = 1e+40", where a
    # memory size above int64 is refused.
    r = run_cli("preview", "--config", str(cfg), "--cpu", cpus, *HOST_ARGS)
    assert r.code == 4, r.err
    assert r.err.strip() == (
        f"kata-mem: error: --cpu {cpus!r}: above 9223372036854775807m (9.223e+15 CPUs); "
        "expected CPUs whose millicores a signed 64-bit integer holds, as the kubelet reads "
        "a CPU limit"
    )


def test_cpus_at_the_bound_are_planned(run_cli: Run, cfg: Path) -> None:
    r = run_cli("preview", "--config", str(cfg), "--cpu", "9223372036854775807m", *HOST_ARGS)
    assert r.code == 0, r.err


@pytest.mark.parametrize("memory", ["-1", "0", "1023Ki"])
def test_host_memory_below_the_minimum_says_the_minimum(
    run_cli: Run, cfg: Path, memory: str
) -> None:
    # Before: -1 was refused as "expected a size of 0 or more", where 0 is refused too.
    r = run_cli("preview", "--config", str(cfg), "--host-memory", memory, "--host-cpus", "4")
    assert r.code == 4, r.err
    assert r.err.strip() == f"kata-mem: error: --host-memory {memory!r}: expected at least 1Mi"


@pytest.mark.parametrize("value", ["\uff12", "1_0", " 2", "0", "-1", "9223372036854775808"])
def test_host_cpus_takes_ascii_digits_in_range(run_cli: Run, value: str) -> None:
    r = run_cli("preview", "--config", UPSTREAM_QEMU, "--host-cpus", value)
    assert r.code == 2
    assert f"'{value}': expected an integer from 1 to 9223372036854775807" in r.err


@pytest.mark.parametrize("value", ["nan", "inf", "\uff15", "0.05", "3601"])
def test_serve_seconds_are_numbers_in_range(run_cli: Run, value: str, tmp_path: Path) -> None:
    r = run_cli("serve", "--socket", str(tmp_path / "s.sock"), "--idle-timeout", value)
    assert r.code == 2
    assert f"'{value}': expected a number of seconds from 0.1 to 3600" in r.err
    assert not (tmp_path / "s.sock").exists()
