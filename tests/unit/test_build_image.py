"""scripts/build_image.py's decisions that need no network, no root and no apt: which Debian
packages (apt-cache's graph, the first alternative, what only maintainer scripts use left
out), which wheels (the manylinux tags of the image's glibc), which files (-slim's rules),
and which layer each file goes to. The build itself runs in tests/node/test_daemonset_image.py
(its fixture)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "build_image", REPO / "scripts" / "build_image.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load()

#: apt-cache depends --recurse --no-recommends ... as Debian 12 answers it (abridged).
DEPENDS = """\
python3-minimal
  PreDepends: python3.11-minimal
  Depends: dpkg
libpython3.11-stdlib
  Depends: libpython3.11-minimal
 |Depends: media-types
  Depends: mime-support
  Depends: libc6
dash
  PreDepends: libc6
  Depends: debianutils
  Depends: dpkg
base-files
  PreDepends: <awk>
    gawk
    original-awk
    mawk
python3.11-minimal
  Depends: libpython3.11-minimal
  Depends: libexpat1
  PreDepends: libc6
libpython3.11-minimal
  Depends: libc6
  Depends: libssl3
media-types
mime-support
  Depends: media-types
libc6
  Depends: libgcc-s1
libgcc-s1
  Depends: gcc-12-base
  Depends: libc6
gcc-12-base
libexpat1
  Depends: libc6
libssl3
  Depends: libc6
dpkg
  PreDepends: tar
tar
  PreDepends: libc6
debianutils
  PreDepends: libc6
<awk>
"""


def test_the_graph_is_read_with_its_alternatives_and_virtual_packages() -> None:
    graph = build.parse_depends(DEPENDS)
    assert graph["libpython3.11-stdlib"] == [
        ["libpython3.11-minimal"],
        ["media-types", "mime-support"],
        ["libc6"],
    ]
    assert graph["base-files"] == [["<awk>"]]
    assert graph["media-types"] == []


def test_the_closure_takes_the_first_alternative_and_leaves_out_what_only_scripts_use() -> None:
    roots = ("python3-minimal", "libpython3.11-stdlib", "dash", "base-files")
    chosen = build.choose(build.parse_depends(DEPENDS), roots, build.SCRIPTS_ONLY)
    assert chosen == sorted(
        [
            *roots,
            "python3.11-minimal",
            "libpython3.11-minimal",
            "media-types",
            "libc6",
            "libgcc-s1",
            "gcc-12-base",
            "libexpat1",
            "libssl3",
        ]
    )
    # dpkg would have brought tar; apt would take mime-support only if media-types could not be.
    assert not {"dpkg", "tar", "debianutils", "mime-support", "mawk"} & set(chosen)


def test_a_virtual_package_is_named_not_guessed() -> None:
    graph = build.parse_depends(DEPENDS)
    with pytest.raises(build.BuildError, match="base-files needs the virtual package awk"):
        build.choose(graph, ("base-files",), frozenset())


def test_the_wheels_are_those_the_image_s_glibc_takes() -> None:
    tags = build.platform_tags((2, 36), "x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert "manylinux_2_37_x86_64" not in tags
    # PEP 600's names and the legacy ones of PEP 513, 571 and 599, each beside its glibc.
    for legacy, minor in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)):
        index = tags.index(f"manylinux_2_{minor}_x86_64")
        assert tags[index + 1] == f"{legacy}_x86_64"
    assert len([t for t in tags if re.fullmatch(r"manylinux_2_\d+_x86_64", t)]) == 36 - 5 + 1


def test_the_image_is_slim_as_debian_s_slim_images(tmp_path: Path) -> None:
    kept = [
        "usr/bin/python3.11",
        "usr/share/doc/coreutils/copyright",
        "usr/share/locale/locale.alias",
    ]
    gone = [
        "usr/share/doc/coreutils/changelog.Debian.gz",
        "usr/share/man/man1/ls.1.gz",
        "usr/share/locale/de/LC_MESSAGES/coreutils.mo",
        "usr/share/info/coreutils.info.gz",
        "usr/share/lintian/overrides/dash",
    ]
    for rel in kept + gone:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert build.slim(tmp_path) == len(gone)
    assert [rel for rel in kept + gone if (tmp_path / rel).exists()] == kept
    assert (tmp_path / "usr/share/man/man1").is_dir()  # directories stay, as dpkg leaves them


def test_a_new_kata_mem_changes_only_the_last_layer(tmp_path: Path) -> None:
    site = build.SITE
    files = [
        "bin/sh",
        f"{site}/yaml/__init__.py",
        f"{site}/PyYAML-6.0.dist-info/METADATA",
        f"{site}/kata_mem/__init__.py",
        f"{site}/kata_mem-0.1.0.dist-info/METADATA",
        "usr/local/bin/idna",
        "usr/local/bin/kata-mem",
        "usr/local/bin/kata-mem-nri",
    ]
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    layers = build.layers_of(tmp_path, "0.1.0")
    assert list(layers) == ["debian", "python", "kata-mem"]
    files_of = {
        name: {p for p in paths if (tmp_path / p).is_file()} for name, paths in layers.items()
    }
    assert files_of == {
        "debian": {"bin/sh"},
        "python": {
            f"{site}/yaml/__init__.py",
            f"{site}/PyYAML-6.0.dist-info/METADATA",
            "usr/local/bin/idna",
        },
        "kata-mem": {
            f"{site}/kata_mem/__init__.py",
            f"{site}/kata_mem-0.1.0.dist-info/METADATA",
            "usr/local/bin/kata-mem",
            "usr/local/bin/kata-mem-nri",
        },
    }
    # Each layer holds the directories above its files.
    assert {"usr", "usr/local", "usr/local/bin", site} <= set(layers["kata-mem"])
