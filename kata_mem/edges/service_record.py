"""Where ``kata-mem serve`` keeps its state, recorded beside its socket: what
``kata-mem-shim`` answering in its own process needs, so that a VM keeps one state wherever
its call is answered (docs/design/state.md, "One state per VM"; issue 33, item 2).

``serve`` writes the record at start-up (:func:`publish_service`); the shim reads it
(:func:`published_service`) under the rule of every file kata-mem uses as root
(:mod:`kata_mem.edges.ownership`): root's or the caller's, writable by no group or other
user, in a directory no other user could swap it through.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Optional

from kata_mem.core.errors import ConfigError
from kata_mem.core.units import KiB
from kata_mem.core.values import Frozen
from kata_mem.edges.files import read_open
from kata_mem.edges.ownership import check_way, who
from kata_mem.edges.statefiles import READ, os_error_text, write_durably

SERVICE_SCHEMA = "kata-mem/service/v1"
#: A record is a few hundred bytes: anything larger is not one serve wrote.
SERVICE_RECORD_CAP = 64 * KiB


class ServiceRecord(Frozen):
    """What ``kata-mem serve`` adds to every request it answers, as it published it beside
    its socket (:func:`publish_service`): its state directory, and the configuration of a
    request whose ``config`` is null (``serve --config``; None: where Kata looks). With it,
    ``kata-mem-shim`` answering in its own process answers as the service would, in the
    same state (issue 33, item 2)."""

    state_dir: str
    config: Optional[str]


def service_record_path(socket: str | Path) -> Path:
    """Where the service at ``socket`` keeps its record: beside it, hidden, named after it
    (:data:`SERVICE_RECORD` for the default name)."""
    where = Path(os.path.abspath(socket))
    return where.with_name(f".{where.name}.service")


def publish_service(socket: str, state_dir: str, config: Optional[str]) -> Path:
    """Record, beside ``socket``, where ``kata-mem serve`` keeps its state: written
    atomically (temporary file, fsync, rename), 0644 (a shim of ``--group`` reads it), and
    kept when serve stops: the state of the VMs it served stays there, and a shim answering
    in its own process meanwhile must use it. A serve started with another state directory
    replaces it.

    :raises ConfigError: another user could replace the record (a directory on the way),
        or it cannot be written; nothing is served then, rather than leave a record of
        another state directory there.
    """
    path = service_record_path(socket)
    where = f"--socket {socket}"
    check_way(path.parent, where, "the record of its state directory", itself=True)
    doc = {
        "schema": SERVICE_SCHEMA,
        "socket": os.path.abspath(socket),
        "state_dir": os.path.abspath(state_dir),
        "config": None if config is None else os.path.abspath(config),
        "pid": os.getpid(),
    }
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        # 0644 whatever the umask: a shim of ``--group`` reads it.
        write_durably(tmp, path, (json.dumps(doc) + "\n").encode(), 0o644)
    except OSError as exc:
        raise ConfigError(
            f"{where}: cannot write {path}, the record of the state directory kata-mem-shim "
            f"answers in when the service does not ({exc.strerror or exc}); nothing was served"
        ) from exc
    return path


def published_service(socket: str | Path) -> Optional[ServiceRecord]:
    """The record of the service at ``socket`` (None: there is none), read under kata-mem's
    trust rule: a regular file of root's or this user's that no group or other user can
    write, in a directory no other user could swap it through.

    :raises ConfigError: there is one that fails the rule, or that is not a record serve
        writes; the message names it, and says that nothing was applied.
    """
    path = service_record_path(socket)
    subject = f"kata-mem serve's record {path}"
    check_way(path.parent, subject, "the record")
    try:
        fd = os.open(path, READ)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(
            f"{subject}: {os_error_text(exc)}; nothing was applied (remove it, or start "
            "kata-mem serve, which writes it)"
        ) from exc
    try:
        info = os.fstat(fd)
        if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:
            raise ConfigError(
                f"{subject}: owned by {who(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}; "
                "kata-mem uses only a record of root's or its own that no group or other user "
                "can write, so nothing was applied (remove it, or start kata-mem serve, which "
                "writes it)"
            )
        raw = read_open(fd, info, path, cap=SERVICE_RECORD_CAP, what="record", error=ConfigError)
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        doc = None
    state_dir = doc.get("state_dir") if isinstance(doc, dict) else None
    config = doc.get("config") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != SERVICE_SCHEMA
        or not isinstance(state_dir, str)
        or not os.path.isabs(state_dir)
        or not (config is None or (isinstance(config, str) and os.path.isabs(config)))
    ):
        raise ConfigError(
            f"{subject}: not a record kata-mem serve writes (expected schema {SERVICE_SCHEMA} "
            "with an absolute state_dir and config); nothing was applied (remove it, or start "
            "kata-mem serve, which writes it)"
        )
    return ServiceRecord(state_dir, config)
