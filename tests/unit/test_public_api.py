"""The public API stays what it is documented to be, whatever has been imported.

``kata_mem.apply`` used to be both the documented function and the submodule
``kata_mem/apply.py``: once anything imported the submodule, the package attribute was
the module and the documented call raised TypeError. Every name of ``__all__`` is checked
here after every module of the package has been imported, in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import REPO

_CHECK = """
import importlib, inspect, json, pkgutil, types, typing
import kata_mem

for info in pkgutil.walk_packages(kata_mem.__path__, "kata_mem."):
    if info.name == "kata_mem.__main__":  # runs the command line when imported
        continue
    if info.name.endswith(("backends.libvirt",)):
        try:
            importlib.import_module(info.name)
        except Exception:  # the libvirt extra may be missing; then it cannot shadow anything
            pass
        continue
    importlib.import_module(info.name)

found = {}
for name in kata_mem.__all__:
    value = getattr(kata_mem, name)
    if name == "__version__":
        found[name] = ["str", isinstance(value, str)]
        continue
    module, _, attr = kata_mem._EXPORTS[name].partition(":")
    expected = getattr(importlib.import_module(module), attr)
    kind = "module" if isinstance(value, types.ModuleType) else (
        "class" if inspect.isclass(value) or typing.get_origin(value) is typing.Union
        else "callable" if callable(value) else "value"
    )
    found[name] = [kind, value is expected]
children = sorted(i.name for i in pkgutil.iter_modules(kata_mem.__path__))
print(json.dumps({"names": found, "children": children}))
"""


def test_every_public_name_is_what_it_is_documented_to_be_after_every_import() -> None:
    r = subprocess.run(
        [sys.executable, "-c", _CHECK],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    names: dict[str, list[object]] = doc["names"]
    assert {n: kind for n, (kind, _) in names.items() if kind == "module"} == {}
    assert [n for n, (_, same) in names.items() if not same] == []
    # The functions of the API are functions, its values classes.
    functions = {"handle", "plan", "load_config", "find_config", "probe_host"}
    functions |= {"parse_quantity", "quantity_bytes", "replace"}
    assert {n for n, (kind, _) in names.items() if kind == "callable"} == functions
    # No module of the package has a public name: the layers and __main__ only.
    assert set(doc["children"]) == {
        "__main__",
        "backends",
        "core",
        "edges",
        "interfaces",
        "orchestration",
    }
    assert not set(doc["children"]) & set(names)


def test_handle_is_the_documented_call() -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import kata_mem, kata_mem.interfaces.cli, kata_mem.orchestration.handle\n"
            "req = kata_mem.SandboxRequest.from_json(open('/dev/stdin', 'rb').read())\n"
            "out = kata_mem.handle(req, {}, kata_mem.CallOptions())\n"
            "print(type(out).__name__, out.plan.memory.target)",
        ],
        input=json.dumps(
            {
                "schema": "kata-mem/shim-request/v1",
                "sandbox_id": "sb",
                "event": "create",
                "config": str(REPO / "configs" / "configuration-qemu.toml"),
                "containers": [{"id": "c", "memory_limit_bytes": 1 << 30}],
                "host": {"memory_bytes": 16 << 30, "cpus": 4, "arch": "amd64"},
            }
        ),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["Planned", str(3 << 30)]
