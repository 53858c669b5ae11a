"""The layers of kata_mem and the imports between them.

Each layer is a folder of the package (core, edges, backends, orchestration,
interfaces); a module's layer is the folder it is in. A module may import only from
its own layer and the layers below it, and no module imports itself back through
others: no exception is allowed. Every import counts: at the top of a file, inside a
function (the lazy ones that keep the shim fast) and under ``TYPE_CHECKING``. The same
map is drawn in the documentation's design page (docs/design/layers.md), and checked against the folders here.
A module over about 600 lines says in its docstring why it is one module.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO, doc

PACKAGE = REPO / "kata_mem"

#: The layers, bottom to top: each is a folder of kata_mem. The package's own
#: ``__init__`` (the public API) and ``__main__`` are the top of the interfaces.
LAYER_ORDER = ("core", "edges", "backends", "orchestration", "interfaces")
RANK = {layer: rank for rank, layer in enumerate(LAYER_ORDER)}
TOP_LEVEL = {"__init__": "interfaces", "__main__": "interfaces"}


def layer_of(module: str) -> str:
    """A module's layer is its folder (``core/plan/memory`` is core), or for the two files at
    the top of the package, interfaces."""
    return TOP_LEVEL.get(module, module.split("/", maxsplit=1)[0])


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


def test_every_module_is_in_a_layer_folder() -> None:
    known = modules()
    unplaced = sorted(m for m in known if layer_of(m) not in RANK)
    assert not unplaced, f"modules outside the layer folders {LAYER_ORDER}: {unplaced}"
    # Every folder of the package is a layer (schemas is package data, no code).
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {*LAYER_ORDER, "schemas"}, folders


def test_nothing_imports_upward() -> None:
    known = modules()
    upward = [
        f"kata_mem/{m}.py:{line}: {m} ({layer_of(m)}) imports {target} ({layer_of(target)})"
        for m in known
        for target, line in imports(m, known)
        if RANK[layer_of(target)] > RANK[layer_of(m)]
    ]
    assert not upward, "imports reach up a layer:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = graph()
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


def _only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return len(body) == 1 and isinstance(body[0], ast.Expr)


def test_the_readme_draws_these_layers() -> None:
    """The drawing on the design page (docs/design/layers.md): one line per layer, its name and
    then its modules (file names without ``.py``), top layer first, as the folders hold them.
    A package inside a layer (``core/plan``) is one name on its layer's line (its
    ``__init__``) and a line of its own under the layer's: its path, then its modules."""
    design = doc("design/layers.md")
    drawing = "".join(design.split("```")[1::2])
    drawn = {
        words[0]: sorted(words[1:])
        for words in (line.split() for line in drawing.splitlines())
        if words and layer_of(words[0]) in RANK
    }
    assert [name for name in drawn if name in RANK] == list(reversed(LAYER_ORDER))
    on_disk: dict[str, list[str]] = {}
    for m, path in modules().items():
        if _only_a_docstring(path):  # a layer folder's own __init__: its description
            continue
        if m in TOP_LEVEL:
            on_disk.setdefault(TOP_LEVEL[m], []).append(m)
            continue
        folder, _, name = m.rpartition("/")
        # A folder's own __init__ is "__init__" on its line, a package's its name on its parent's.
        on_disk.setdefault(folder or m, []).append(name if folder else "__init__")
    assert drawn == {folder: sorted(names) for folder, names in on_disk.items()}


def test_the_checks_see_function_level_and_type_checking_imports() -> None:
    known = modules()
    # handle and render are imported only inside protocol's functions
    protocol = {target for target, _ in imports("interfaces/protocol", known)}
    assert {"orchestration/handle", "interfaces/render"} <= protocol
    # and Answer only under TYPE_CHECKING in metrics
    assert "interfaces/protocol" in {t for t, _ in imports("interfaces/metrics", known)}


#: Longer than this, a module says in its docstring why it is one module.
LONG_MODULE = 600
#: "about 1,200 lines": the length a docstring gives.
ABOUT = re.compile(r"about ([\d,]+) lines")


def test_a_long_module_says_why_it_is_one_in_its_docstring() -> None:
    """A module over about 600 lines gives its reason in its docstring, with its length
    ("One module (about 740 lines) because ..."), within a tenth of what it is now; a file a
    script writes ("do not edit") is exempt: its length is its generator's."""
    unsaid = []
    for name, path in modules().items():
        text = path.read_text()
        lines = text.count("\n")
        if lines <= LONG_MODULE:
            continue
        said = " ".join((ast.get_docstring(ast.parse(text, str(path))) or "").split())
        if "do not edit" in said:
            continue
        about = ABOUT.search(said)
        if about is None or abs(int(about.group(1).replace(",", "")) - lines) > lines / 10:
            unsaid.append(f"kata_mem/{name}.py: {lines} lines, docstring: {about and about[0]}")
    assert not unsaid, "\n".join(unsaid)
