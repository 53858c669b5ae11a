"""The OCI layout writer of tests/support/oci_image.py, which builds the rig's pause image and
kata-mem's image (scripts/build_image.py): reproducible layers that keep what a root
filesystem needs, and a layout whose index, manifest and config name every blob by its
digest."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from tests.support.oci_image import (
    EPOCH,
    LAYER_GZIP_TYPE,
    LAYER_TYPE,
    image_config,
    image_ref,
    read_blob,
    read_index,
    tree_paths,
    write_image_tar,
    write_layer,
    write_layout_tar,
)


def a_tree(root: Path) -> None:
    """A directory, a file, an executable, a symlink and a file with two links."""
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text("ID=debian\n")
    (root / "bin").mkdir()
    (root / "bin" / "dash").write_bytes(b"\x7fELF")
    (root / "bin" / "dash").chmod(0o755)
    (root / "bin" / "sh").symlink_to("dash")
    (root / "usr").mkdir()
    os.link(root / "bin" / "dash", root / "usr" / "dash")


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_layer_is_the_same_bytes_for_the_same_files_whenever_written(tmp_path: Path) -> None:
    root = tmp_path / "root"
    a_tree(root)
    first = write_layer(
        root, tree_paths(root), tmp_path / "1", compress=True, created_by="x", owner=(0, 0)
    )
    os.utime(root / "etc" / "os-release", (12345, 12345))
    (root / "bin").chmod(0o755)
    second = write_layer(
        root, tree_paths(root), tmp_path / "2", compress=True, created_by="x", owner=(0, 0)
    )
    assert first.media_type == LAYER_GZIP_TYPE
    assert (first.digest, first.diff_id) == (second.digest, second.diff_id)
    blob = first.path.read_bytes()
    assert (sha256(blob), len(blob)) == (first.digest, first.size)
    assert sha256(gzip.decompress(blob)) == first.diff_id != first.digest


def test_a_layer_keeps_types_modes_links_and_orders_its_entries(tmp_path: Path) -> None:
    root = tmp_path / "root"
    a_tree(root)
    layer = write_layer(root, tree_paths(root), tmp_path / "l", compress=False, created_by="x")
    assert layer.media_type == LAYER_TYPE and layer.digest == layer.diff_id
    with tarfile.open(layer.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        names = [m.name for m in tar.getmembers()]
    assert names == sorted(names, key=os.fsencode)
    assert names.index("bin") < names.index("bin/dash")
    assert all(m.mtime == EPOCH and m.uname == m.gname == "" for m in members.values())
    assert members["bin"].isdir() and members["bin/dash"].mode == 0o755
    assert members["etc/os-release"].mode == 0o644
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "dash"
    # The second link of a file is a hard link to the first, not its bytes again.
    assert members["usr/dash"].islnk() and members["usr/dash"].linkname == "bin/dash"
    st = (root / "bin" / "dash").stat()
    assert (members["bin/dash"].uid, members["bin/dash"].gid) == (st.st_uid, st.st_gid)


def test_a_layer_refuses_what_a_root_filesystem_cannot_hold(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="not a directory, regular file or symlink"):
        write_layer(tmp_path, ["fifo"], tmp_path / "l", compress=False, created_by="x")


def test_the_layout_names_the_image_and_every_blob_by_its_digest(tmp_path: Path) -> None:
    root = tmp_path / "root"
    a_tree(root)
    layers = [
        write_layer(root, ["etc", "etc/os-release"], tmp_path / "a", compress=True, created_by="a"),
        write_layer(root, ["bin", "bin/dash"], tmp_path / "b", compress=False, created_by="b"),
    ]
    config = image_config(
        layers, entrypoint=["kata-mem"], cmd=["serve"], env=["PATH=/bin"], labels={"v": "1"}
    )
    out = tmp_path / "image.tar"
    digest = write_layout_tar(out, "registry.example/kata-mem:0.1.0", layers, config)
    assert image_ref(out) == "registry.example/kata-mem:0.1.0"
    (entry,) = read_index(out)["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
    manifest = json.loads(read_blob(out, digest))
    assert [(m["mediaType"], m["digest"]) for m in manifest["layers"]] == [
        (layer.media_type, layer.digest) for layer in layers
    ]
    got = json.loads(read_blob(out, manifest["config"]["digest"]))
    assert got["rootfs"]["diff_ids"] == [layer.diff_id for layer in layers]
    assert got["config"]["Entrypoint"] == ["kata-mem"] and got["config"]["Cmd"] == ["serve"]
    assert [h["created_by"] for h in got["history"]] == ["a", "b"]
    with tarfile.open(out) as tar:
        names = tar.getnames()
        blobs = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and m.name.startswith("blobs/")
        }
    assert names[:2] == ["oci-layout", "index.json"]
    assert all(name == "blobs/sha256/" + sha256(data)[7:] for name, data in blobs.items())
    assert len(blobs) == 4  # two layers, the config, the manifest


def test_a_ref_without_a_tag_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give the tag"):
        write_layout_tar(tmp_path / "x.tar", "registry.example:5000/kata-mem", [], {})


def test_the_one_binary_image_runs_its_binary_as_root(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF")
    binary.chmod(0o755)
    out = tmp_path / "pause.tar"
    digest = write_image_tar(binary, out, "localhost/kata-mem-test/pause:1")
    manifest = json.loads(read_blob(out, digest))
    config = json.loads(read_blob(out, manifest["config"]["digest"]))
    assert config["config"]["Entrypoint"] == ["/pause"]
    layer = read_blob(out, manifest["layers"][0]["digest"])
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
    assert (member.name, member.mode, member.uid, member.gid) == ("pause", 0o755, 0, 0)
    assert sorted(tmp_path.iterdir()) == sorted([binary, out])  # no layer file left
