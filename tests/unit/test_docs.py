"""The documentation: the site builds with MkDocs in strict mode (a broken link, a page
missing from the navigation or a snippet that is not there fails it), and the README stays
the short front page that links into it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import DOCS, REPO

#: Relative links in Markdown: [text](target), outside code.
LINK = re.compile(r"\]\(([^)#:]+)(?:#[^)]*)?\)")
#: A paragraph of the built site, and a Markdown list item left as text inside one.
RENDERED_PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
LIST_LINE = re.compile(r"\n\s*(?:[-*+]|\d+\.) \S")
#: A list item indented one to three spaces.
SHALLOW_ITEM = re.compile(r"^ {1,3}(?:[-*+]|\d+\.) \S")


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    # The CLI pages come from click itself: every command is there.
    from kata_mem.interfaces.cli import cli as group

    for name in group.commands:
        assert f"kata-mem {name}" in cli, name
    # A Markdown list needs a blank line before it (and nested items four spaces): without
    # one it runs into the paragraph above, which the HTML shows as "- item" text.
    run_together = [
        (str(page.relative_to(tmp_path / "site")), para[:80])
        for page in sorted((tmp_path / "site").rglob("*.html"))
        for para in RENDERED_PARAGRAPH.findall(page.read_text())
        if LIST_LINE.search(para)
    ]
    assert run_together == []
    # Material breaks inline code anywhere; in a table cell a file name stays whole.
    css = (tmp_path / "site" / "stylesheets" / "extra.css").read_text()
    assert "table:not([class]) code" in css and "word-break: normal" in css
    page = (tmp_path / "site" / "guide" / "kubernetes" / "index.html").read_text()
    assert 'href="../../stylesheets/extra.css"' in page
    # A table held wider than the page by a code span it may not wrap is cut off at the
    # page's edge (the in-place resize page's flags, 77 characters of a path).
    assert wide_table_code(tmp_path / "site") == []


def test_nested_lists_are_indented_as_python_markdown_reads_them() -> None:
    """Python-Markdown nests a list only when it is indented four spaces (its tab length):
    one indented one to three spaces is flattened into its parent."""
    shallow = []
    for page in sorted(DOCS.rglob("*.md")):
        fence = False
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = not fence
            elif not fence and SHALLOW_ITEM.match(line):
                shallow.append(f"{page.relative_to(DOCS)}:{number}")
    assert shallow == []


def test_every_page_is_in_the_navigation() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []


def _links(text: str) -> list[str]:
    outside_code = re.sub(r"```.*?```", "", text, flags=re.S)
    return LINK.findall(outside_code)


def test_the_readme_is_a_front_page_whose_links_resolve() -> None:
    for name in ("README.md", "CONTRIBUTING.md"):
        text = (REPO / name).read_text()
        missing = [t for t in _links(text) if not (REPO / t).exists()]
        assert missing == [], (name, missing)
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for heading in ("## Quick start", "## Install", "## A five-minute tour", "## Documentation"):
        assert heading in readme
    assert (REPO / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_no_command_runs_the_system_pythons_pip() -> None:
    """Debian 12's python3 has no pip unless python3-pip is installed, and refuses installs
    into itself (PEP 668): a wheel is built with the pip of a virtualenv (python3-venv, which
    the install guide asks for), as docs/guide/install.md builds it."""
    texts = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
    texts += sorted((REPO / "deploy").rglob("Containerfile"))
    system_pip = re.compile(r"\bpython3? -m pip\b")
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for path in texts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if system_pip.search(line)
    ]
    assert found == []


def test_a_cron_line_runs_kata_mem_by_its_installed_path() -> None:
    """cron runs a line of /etc/cron.d with PATH=/usr/bin:/bin (cron's default), where the
    node install's kata-mem (/usr/local/bin) is not: such a line names it in full, as the
    units do."""
    cron = re.compile(r"(?:^|[`\s])((?:[0-9*/,-]+ ){5}root (\S+))")
    lines = [
        (str(page.relative_to(REPO)), found.group(1), found.group(2))
        for page in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
        # An inline example may be broken over lines, as Markdown joins them.
        for found in cron.finditer(" ".join(page.read_text().split()))
    ]
    assert lines != []
    assert [
        (page, line) for page, line, command in lines if command != "/usr/local/bin/kata-mem"
    ] == []


#: A path of this repository named in a page (a placeholder such as TABLE stands for any name).
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:configs|examples|scripts|deploy|tests|kata_mem|clients|docs)/[\w./*-]+)"
)


def test_every_path_of_the_repository_a_page_names_exists() -> None:
    """CONTRIBUTING.md's "one module" ran tests/unit/test_planner.py, which is not there."""
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    pages += sorted((REPO / "deploy").rglob("*.yaml")) + sorted(
        (REPO / "deploy").rglob("Containerfile")
    )
    pages += sorted((REPO / "configs" / "systemd").iterdir())
    missing = []
    for page in pages:
        for found in REPO_PATH.finditer(page.read_text()):
            path = found.group(1).rstrip(".,:;)")
            if re.search(r"/[A-Z]+(?:[./]|$)", path):  # a placeholder
                continue
            exists = any(REPO.glob(path)) if "*" in path else (REPO / path).exists()
            if not exists:
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert missing == []


def test_a_venv_tool_the_pages_run_is_one_the_quick_start_installs_or_they_say_how() -> None:
    """`.venv/bin/mkdocs serve` after `scripts/demo` (which installs kata-mem alone) was
    "No such file or directory": a page that runs a tool of .venv that only an extra brings
    says how to install that extra there (scripts/bootstrap.sh .venv EXTRA)."""
    extras = {"mkdocs": "docs"}
    missing = []
    for page in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for paragraph in page.read_text().split("\n\n"):
            for tool, extra in extras.items():
                if f".venv/bin/{tool} " in paragraph and (
                    f"scripts/bootstrap.sh .venv {extra}" not in paragraph
                ):
                    missing.append(f"{page.relative_to(REPO)}: .venv/bin/{tool}")
    assert missing == []


def test_the_libvirt_extra_s_build_packages_are_named_in_full() -> None:
    """`EXTRAS=libvirt scripts/install-node.sh` compiles libvirt-python: with only the
    libvirt-dev and pkg-config the pages named, a fresh Debian 12 has no gcc and no Python.h.
    Each page that names what it needs names what scripts/install-system-deps.sh installs."""
    script = (REPO / "scripts" / "install-system-deps.sh").read_text()
    (listed,) = re.findall(r"packages\+=\((libvirt-dev [^)]*)\)", script)
    needed = [*listed.split(), "python3-dev"]
    assert "python3-dev" in script
    short = []
    for page in [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for paragraph in page.read_text().split("\n\n"):
            if "libvirt-dev" in paragraph and "pkg-config" in paragraph:
                missing = [p for p in needed if p not in paragraph]
                if missing:
                    short.append(f"{page.relative_to(REPO)}: {missing}")
    assert short == []


def test_make_unit_is_not_said_to_need_no_system_packages() -> None:
    """`make unit` and `make lint` install the test extra, which compiles libvirt-python
    (gcc, libvirt-dev, Python.h): on a fresh Debian 12 they stop there. The pages say what
    they need instead of "no system packages"."""
    extras = (REPO / "pyproject.toml").read_text()
    assert re.search(r'(?s)\ntest = \[[^]]*"libvirt-python', extras)
    texts = [REPO / "Makefile", REPO / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    claims = [
        str(path.relative_to(REPO))
        for path in texts
        if "no system packages" in " ".join(path.read_text().split())
    ]
    assert claims == []
    for path in (REPO / "CONTRIBUTING.md", DOCS / "guide" / "quick-start.md"):
        text = " ".join(path.read_text().split())
        assert "scripts/install-system-deps.sh libvirt" in text, path


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """The lines of a page outside fenced code, numbered."""
    lines, fence = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            lines.append((number, line))
    return lines


#: What Python-Markdown reads as a heading: one to six '#' at the start of a line, with or
#: without a space after them (its HashHeaderProcessor), inside a paragraph too.
HEADING = re.compile(r"^#{1,6}(?!#)")


def stray_headings(pages: list[Path], root: Path) -> list[str]:
    """Lines that Python-Markdown makes headings and that are not written as one: '#' then a
    space, after a blank line."""
    found = []
    for page in pages:
        previous = ""
        for number, line in prose_lines(page):
            if HEADING.match(line) and (
                not re.match(r"^#{1,6} \S", line) or (previous.strip() != "" and number > 1)
            ):
                found.append(f"{page.relative_to(root)}:{number}: {line[:40]}")
            previous = line
    return found


def test_a_line_begins_with_a_hash_only_when_it_is_a_heading(tmp_path: Path) -> None:
    """ "kubernetes PR\\n#137555, the kubelet resizes..." rendered "137555, the kubelet..." as
    a heading: a number wrapped to the start of a line. A line that begins with '#' is a
    heading, '#' then a space, after a blank line; a PR number never begins one."""
    assert stray_headings(sorted(DOCS.rglob("*.md")), DOCS) == []
    # The check finds that line, as the in-place resize page had it.
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSince 1.35 and kubernetes PR\n#137555, the kubelet resizes\n")
    assert stray_headings([page], tmp_path) == ["page.md:4: #137555, the kubelet resizes"]


def table_cells(row: str) -> list[str]:
    """The cells of a Markdown table row, as Python-Markdown's tables extension splits them: at
    each '|' that is neither escaped nor inside a code span."""
    cells, cell, code, i = [], "", "", 0
    text = row.strip()
    text = text[1:] if text.startswith("|") else text
    text = text[:-1] if text.endswith("|") and not text.endswith("\\|") else text
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            cell += text[i : i + 2]
            i += 2
            continue
        if char == "`":
            ticks = re.match(r"`+", text[i:])
            assert ticks is not None
            run = ticks.group(0)
            if not code:
                closing = text.find(run, i + len(run))
                if closing != -1:
                    code = run
            elif run == code:
                code = ""
            cell += run
            i += len(run)
            continue
        if char == "|" and not code:
            cells.append(cell)
            cell = ""
        else:
            cell += char
        i += 1
    return [*cells, cell]


#: The row under a table's header: dashes, colons and pipes.
DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def broken_tables(pages: list[Path], root: Path) -> list[str]:
    """Tables without their header and delimiter rows, and rows without the header's cells."""
    broken = []
    for page in pages:
        lines = prose_lines(page)
        i = 0
        while i < len(lines):
            number, line = lines[i]
            if not line.lstrip().startswith("|"):
                i += 1
                continue
            block = []
            while i < len(lines) and lines[i][1].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            if len(block) < 2 or not DELIMITER.match(block[1][1]):
                broken.append(f"{page.relative_to(root)}:{number}: no header and delimiter row")
                continue
            width = len(table_cells(block[0][1]))
            broken += [
                f"{page.relative_to(root)}:{n}: {len(table_cells(row))} cells, header {width}"
                for n, row in block[1:]
                if len(table_cells(row)) != width
            ]
    return broken


def test_every_table_is_whole(tmp_path: Path) -> None:
    """A row with fewer cells than its header renders its last cells empty, one with more
    loses what is past the header's; a table broken by a line that is not a row goes on as
    text, and its rest as text too (no header, no delimiter row). Every table here starts
    with its header and delimiter, and each row has the header's cells ('|' in code and
    escaped '\\|' do not count)."""
    assert broken_tables([REPO / "README.md", *sorted(DOCS.rglob("*.md"))], REPO) == []
    # The check finds both: a row short of a cell, and a table's rest after a line.
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n| --- | --- |\n| `x|y` | z \\| w |\n| short |\nbroken\n| c | d |\n")
    assert broken_tables([page], tmp_path) == [
        "page.md:4: 1 cells, header 2",
        "page.md:6: no header and delimiter row",
    ]


#: The longest code span a table cell may hold: extra.css keeps a table's code on one line
#: (`white-space: nowrap`, so that a file name is never broken), so the table is at least
#: that wide. Material's content column is about 590 px between its two sidebars, and its
#: table code about 8 px a character: 60 characters and the other cells' words fit.
TABLE_CODE_MAX = 60


def wide_table_code(site: Path) -> list[str]:
    """The code spans of the built site's tables longer than TABLE_CODE_MAX characters."""
    from html import unescape

    wide = []
    for page in sorted(site.rglob("*.html")):
        for table in re.findall(r"<table>(.*?)</table>", page.read_text(), re.S):
            for code in re.findall(r"<code>(.*?)</code>", table, re.S):
                text = unescape(re.sub(r"<[^>]+>", "", code))
                if len(text) > TABLE_CODE_MAX:
                    wide.append(f"{page.relative_to(site).parent}: {text}")
    return wide


def exit_code_row(page: str, code: str) -> str:
    (row,) = [
        line for line in (DOCS / page).read_text().splitlines() if line.startswith(f"| {code} |")
    ]
    return " ".join(row.split())


def test_troubleshooting_sends_a_plug_timeout_to_its_cause() -> None:
    """Exit 8 was "did not finish in time: the next call settles it". A grow the guest does
    not show (PlugTimeout) is not settled by waiting: a guest that leaves the memory offline
    keeps it so (the next call answers NoChange, QEMU having it), and a staged grow, which
    kernel onlining brings and which kata-mem assumes when nothing says how the guest
    onlines (guest_onlining unset), waits on room the guest may never show. The row quotes
    both of apply's waits and names where the onlining is said."""
    executor = (REPO / "kata_mem" / "orchestration" / "executor.py").read_text()
    waits = ["the guest did not show", "the memory of", "room for the next step above the headroom"]
    assert all(w in executor for w in waits)
    row = exit_code_row("guide/troubleshooting.md", "8")
    for said in [*waits, "`guest onlining:`", "`[kata_mem] guest_onlining`", "`kernel_params`"]:
        assert said in row, said
    assert "NoChange" in row and "UnplugTimeout" in row


def test_only_apply_dry_run_is_said_to_show_the_steps_apply_would_run() -> None:
    """The README said `kata-mem preview` shows the exact steps `apply` would run: a preview
    never sees a VM (it plans from the boot memory, or --current), so only `apply --dry-run`,
    which reads the live VM and changes nothing, shows those. The front pages and preview's
    own help say which shows what."""
    from kata_mem.interfaces.cli import cli as group

    for page in (REPO / "README.md", DOCS / "index.md"):
        text = " ".join(page.read_text().split())
        assert "preview` shows the exact steps" not in text, page
        (bullet,) = [p for p in page.read_text().split("\n- ") if "Previews come first" in p]
        bullet = " ".join(bullet.split())
        assert "`kata-mem apply --dry-run`" in bullet and "live VM" in bullet, page
    commands = " ".join((DOCS / "reference" / "commands.md").read_text().split())
    assert "`preview` shows what `apply` would do" not in commands
    help_text = " ".join((group.commands["preview"].help or "").split())
    assert "apply --dry-run" in help_text and "what apply would do" not in help_text
