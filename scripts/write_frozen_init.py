#!/usr/bin/env python3
"""Write kata_mem/core/frozen_init.py: the ``__init__`` of every frozen record, ahead of time.

Run after adding, removing or changing a field of a ``@frozen`` class (``make frozen``);
tests/unit/test_frozen.py fails until then. The text comes from
:func:`kata_mem.core.frozen.init_module`; this script only finds the records (every module
of the package, imported) and writes the file.

    .venv/bin/python scripts/write_frozen_init.py [--check]
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kata_mem  # noqa: E402
from kata_mem.core.frozen import init_module, module_records  # noqa: E402

TARGET = ROOT / "kata_mem" / "core" / "frozen_init.py"


def records() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(kata_mem.__path__, "kata_mem."):
        if info.name == "kata_mem.__main__":  # runs the CLI when imported
            continue
        found += module_records(importlib.import_module(info.name))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = init_module(records())
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run scripts/write_frozen_init.py")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
