"""The layers of kata_mem, module by module, and the imports between them (issue 10).

Each module may import only from its own layer and the layers below it, and no
module imports itself back through others. Every import counts: at the top of a
file, inside a function (the lazy ones that keep the shim fast) and under
``TYPE_CHECKING``. The same map is drawn in the README's "Design" section.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "kata_mem"

#: Bottom to top. A module's name is its path under kata_mem/ without ``.py``
#: (``backends`` is backends/__init__.py, ``__init__`` the package itself).
LAYERS: dict[str, tuple[str, ...]] = {
    # Pure: no file, socket, clock or environment.
    "core": (
        "errors",
        "units",
        "quantity",
        "model",
        "fields",
        "request",
        "manifest",
        "planner",
        "safety",
        "outcomes",
        "reports",
    ),
    # I/O at the edges: files, /proc and cgroups, the journal, stderr.
    "edges": ("files", "logs", "config", "host", "cgroups", "sources", "journal"),
    # The hypervisor port and its adapters.
    "backends": ("backends", "backends/fake", "backends/qmp", "backends/libvirt"),
    # What runs a request: serve, the executor and its parts, reconcile.
    "orchestration": ("guards", "executor", "repair", "usage", "apply", "reconcile"),
    # What users and runtimes call.
    "interfaces": ("render", "shim", "metrics", "service", "cli", "main", "__main__", "__init__"),
}
RANK = {module: rank for rank, modules in enumerate(LAYERS.values()) for module in modules}
LAYER = {module: layer for layer, modules in LAYERS.items() for module in modules}

#: The one cycle: the port's ``open_backend`` imports the adapter it is asked for
#: (lazily, so that a plan never loads a client library), and the adapters import
#: the port's types. It goes once ``open_backend`` moves up into orchestration.
PORT_FACTORY = {("backends", "backends/qmp"), ("backends", "backends/libvirt")}


def module_name(path: Path) -> str:
    name = path.relative_to(PACKAGE).with_suffix("").as_posix()
    return name.removesuffix("/__init__")


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(dotted: str, known: dict[str, Path]) -> str:
    """The kata_mem module a dotted name is in (``kata_mem.backends.Backend`` is in
    ``backends``); ``__init__`` for the package itself."""
    parts = dotted.split(".")[1:]
    while parts:
        name = "/".join(parts)
        if name in known:
            return name
        parts.pop()
    return "__init__"


def imports(module: str, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The kata_mem modules ``module`` imports, with the line of each import."""
    path = known[module]
    tree = ast.parse(path.read_text(), str(path))
    package = ["kata_mem", *module.split("/")[:-1]]
    if path.name == "__init__.py" and module != "__init__":
        package.append(module.rsplit("/", maxsplit=1)[-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "kata_mem":
                    yield _resolve(alias.name, known), node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            if base.split(".")[0] != "kata_mem":
                continue
            for alias in node.names:
                yield _resolve(f"{base}.{alias.name}", known), node.lineno


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: {target for target, _ in imports(m, known) if target != m} for m in known}


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(set(modules()) - set(RANK))
    assert not unplaced, f"modules in no layer (add them to LAYERS and to the README): {unplaced}"
    assert len(RANK) == sum(len(m) for m in LAYERS.values()), "a module is in two layers"


def test_nothing_imports_upward() -> None:
    known = modules()
    upward = [
        f"kata_mem/{m}.py:{line}: {m} ({LAYER[m]}) imports {target} ({LAYER[target]})"
        for m in known
        for target, line in imports(m, known)
        if m in RANK and target in RANK and RANK[target] > RANK[m]
    ]
    assert not upward, "imports reach up a layer:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = {
        m: {t for t in targets if (m, t) not in PORT_FACTORY} for m, targets in graph().items()
    }
    done: set[str] = set()

    def visit(m: str, stack: list[str]) -> None:
        if m in stack:
            cycle = [*stack[stack.index(m) :], m]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if m in done:
            return
        for target in sorted(edges.get(m, ())):
            visit(target, [*stack, m])
        done.add(m)

    for m in sorted(edges):
        visit(m, [])


def test_the_readme_draws_these_layers() -> None:
    """The drawing in the README's Design section: one line per layer, its name and
    then its modules, top layer first."""
    readme = (REPO / "README.md").read_text()
    design = readme[readme.index("\n## Design") :]
    design = design[: design.index("\n## ", 1)]
    drawing = "".join(design.split("```")[1::2])
    drawn = {
        words[0]: tuple(words[1:])
        for words in (line.split() for line in drawing.splitlines())
        if words and words[0] in LAYERS
    }
    assert list(drawn) == list(reversed(LAYERS))
    for layer, names in LAYERS.items():
        assert sorted(drawn[layer]) == sorted(names), layer


def test_the_checks_see_function_level_and_type_checking_imports() -> None:
    known = modules()
    shim = {target for target, _ in imports("shim", known)}
    assert {"apply", "render", "request"} <= shim  # apply and render only inside functions
    assert "reconcile" in {target for target, _ in imports("render", known)}  # TYPE_CHECKING
