"""Logging on stderr for the CLI and the shim: text for people, JSON lines for shims."""

from __future__ import annotations

import json
import logging
import sys


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc)


def get_logger(name: str) -> logging.Logger:
    """A module's logger. The library stays silent until the caller configures
    logging (a NullHandler on the package logger), and the shim's plan-only path,
    which logs nothing, never pays for importing logging."""
    root = logging.getLogger("kata_mem")
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    return logging.getLogger(name)


def setup_logging(verbose: int, fmt: str) -> None:
    """Configure the ``kata_mem`` logger once: warnings by default, more with ``-v``."""
    logger = logging.getLogger("kata_mem")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("kata-mem: %(levelname)s: %(message)s")
    )
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.WARNING - 10 * min(verbose, 2))
