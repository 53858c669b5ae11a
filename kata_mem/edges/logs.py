"""Everything kata-mem writes on stderr, for the CLI and the shim: text for people,
one JSON object per line for machines (``--log-format json``).

A JSON line has ``ts``, ``level``, ``logger`` and ``message``; an error line adds
``kind`` and ``exit_code`` (the same fields as the error documents on stdout).
``logging`` is imported only when logging is configured, so the shim's plan-only
path, which logs nothing, never pays for it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import logging

    from kata_mem.core.errors import KataMemError

FORMATS = ("text", "json")

#: The format of the lines this process writes; set by :func:`setup_logging`.
_format = "text"


def current_format() -> str:
    return _format


def set_format(fmt: str) -> None:
    global _format  # noqa: PLW0603 - one stderr format per process, chosen once by the caller
    _format = fmt if fmt in FORMATS else "text"


def line(
    level: str,
    message: str,
    *,
    logger: str = "kata_mem",
    prefix: str = "kata-mem",
    ts: Optional[float] = None,
    **fields: Any,
) -> str:
    """One stderr line in the current format (without the newline)."""
    if _format == "json":
        doc: dict[str, Any] = {
            "ts": round(time.time() if ts is None else ts, 3),
            "level": level,
            "logger": logger,
            "message": message,
        }
        doc.update(fields)
        return json.dumps(doc)
    return f"{prefix}: {level}: {message}"


def split_global_options(args: list[str]) -> tuple[int, Optional[str], list[str]]:
    """``-v``/``--verbose`` (counted) and ``--log-format`` taken out of ``args``
    wherever they are: for the shim, which runs without click, and for the CLI's
    errors before click has parsed them. A missing value comes back as ``""``; the
    caller refuses it.
    """
    verbose, fmt, rest = 0, None, []
    it = iter(args)
    for arg in it:
        if arg == "--verbose" or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            verbose += 1 if arg == "--verbose" else len(arg) - 1
        elif arg == "--log-format":
            fmt = next(it, "")
        elif arg.startswith("--log-format="):
            fmt = arg.partition("=")[2]
        else:
            rest.append(arg)
    return verbose, fmt, rest


def emit(level: str, message: str, **fields: Any) -> None:
    """Write one line on stderr (see :func:`line`). A stderr that cannot take it (none,
    closed, a pipe whose reader has gone, a full disk) loses the line and nothing else:
    the caller's result and exit code do not depend on its diagnostics."""
    if sys.stderr is None:  # no stderr at all (the process was started without one)
        return
    try:
        sys.stderr.write(line(level, message, **fields) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # ValueError: a stream someone closed
        pass


def emit_error(exc: KataMemError, *, logger: str = "kata_mem", prefix: str = "kata-mem") -> None:
    """The one line that reports a failure: its message, kind and exit code."""
    emit("error", exc.message, logger=logger, prefix=prefix, kind=exc.kind, exit_code=exc.exit_code)


def describe(exc: BaseException) -> str:
    """An exception for a message: its type and its text on one line; the type
    alone when the text is empty (``TimeoutError()``, ``EOFError()``)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def get_logger(name: str) -> logging.Logger:
    """A module's logger. The library stays silent until the caller configures
    logging (a NullHandler on the package logger)."""
    import logging

    root = logging.getLogger("kata_mem")
    if not root.handlers:
        root.addHandler(logging.NullHandler())
    return logging.getLogger(name)


def at_least_info() -> None:
    """kata-mem's records from INFO up at least (``-vv`` keeps DEBUG): what a daemon logs
    by default."""
    import logging

    logger = logging.getLogger("kata_mem")
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def setup_logging(verbose: int, fmt: str) -> None:
    """Configure stderr once per call: kata-mem's own records at WARNING by default
    (more with ``-v``), and every other library's warnings (``qemu.qmp``, asyncio,
    Python warnings) in the same format, so no line on stderr escapes it."""
    import logging

    set_format(fmt)

    class Formatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + self.formatException(record.exc_info)
            if _format == "json":
                # A record's ``extra={"fields": {...}}`` (a served request's sandbox, event,
                # outcome, duration) become fields of its JSON line.
                fields = getattr(record, "fields", None)
                return line(
                    record.levelname.lower(),
                    message,
                    logger=record.name,
                    ts=record.created,
                    **(fields if isinstance(fields, dict) else {}),
                )
            return f"kata-mem: {record.levelname}: {message}"

    # The formatter shows none of a record's thread, process or source line: not
    # looked up for each record (the logging HOWTO, "Optimization"; kata-mem serve logs
    # every request it answers).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Formatter())
    logger = logging.getLogger("kata_mem")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.WARNING - 10 * min(verbose, 2))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.captureWarnings(True)
    # qemu.qmp logs each failure it then raises; the backend reports those itself,
    # translated, so its own records are only for debugging (-vv).
    logging.getLogger("qemu.qmp").setLevel(logging.DEBUG if verbose >= 2 else logging.CRITICAL + 1)
