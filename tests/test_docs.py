"""The README stays the newcomer's path and the documentation site stays whole.

Cheap checks (in `make check`): the README's length and its relative links, the site's navigation against the pages
in docs/, the CLI reference as mkdocs-click renders it (every verb and flag of the click commands), and the NVTX
contract's table against `nsys_cc.contract`, and every code name docs/architecture.md cites against the package. The
site's strict build itself is `make docs`, which `make test` runs;
the slow test here checks that the build really fails on a broken link or anchor (the strictness is configuration,
and a configuration can be lost).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300  # the newcomer's path is about 250 lines; the reference lives in docs/

# [text](target) outside code; images too. Code spans and fenced blocks are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def unfenced(markdown: str) -> str:
    """A Markdown file's text without its fenced code blocks (a `#` line in one is no heading)."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", markdown, flags=re.S | re.M)


def prose(markdown: str) -> str:
    """The text of a Markdown file without fenced code blocks and code spans (links inside code are not links)."""
    return re.sub(r"`[^`\n]*`", "", unfenced(markdown))


def slug(heading: str) -> str:
    """The anchor MkDocs gives a heading (Python-Markdown's toc slugify on the heading's text)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"[`*_]", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return slugify(text, "-")


def anchors(page: Path) -> set[str]:
    headings = re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", unfenced(page.read_text()), re.M)
    return {slug(m.group(1).strip()) for m in headings}


def generated(page: Path) -> bool:
    """Whether a page holds generated parts (`::: mkdocs-click`, `::: nsys_cc…`), whose headings only the build
    knows: links to their anchors are left to the strict build."""
    return re.search(r"^::: ", page.read_text(), re.M) is not None


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` whose file does not exist, or whose `#anchor` is no heading of a Markdown file."""
    out = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and not generated(dest) and anchor not in anchors(dest):
            out.append(f"{target} (no such heading in {dest.name})")
    return out


def nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in nav_pages(value)]
    return []


def mkdocs_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


# ---- the README ----------------------------------------------------------------------------------------------------


def test_readme_stays_the_newcomers_path():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, (
        f"README.md has {lines} lines (at most {MAX_README_LINES}): move reference material into a page of docs/")
    for section in ("## Two commands", "## Worked example", "## Where to go next"):
        assert section in README.read_text()


def test_readme_links_resolve():
    assert relative_links(README), "the README links to no page at all"
    assert broken_links(README) == []


def test_readme_points_at_the_site_pages():
    # every page of the site's guides is reachable from the README's "where to go next"
    linked = {Path(t.partition("#")[0]).name for t in relative_links(README) if t.startswith("docs/")}
    for page in ("profile.md", "analyze.md", "kernels.md", "speedup.md", "sweep.md", "speculative.md", "ranks.md",
                 "live.md", "definitions.md", "reliability.md", "plugin.md", "architecture.md", "cli.md", "api.md"):
        assert page in linked, f"README.md does not link docs/{page}"


def test_pages_named_in_the_code_exist():
    # docstrings, comments and scripts point readers at docs/<page>.md: when a page moves, the pointers move with it
    outside = {"NSYS_REFERENCE.md"}  # the project's shared notes (../shared/docs), not a page of this repository
    named: dict[str, set[str]] = {}
    for folder in ("nsys_cc", "benchmarks", "scripts", "tests", "notebooks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh", ".ipynb") and path.is_file():
                for page in re.findall(r"\bdocs/([A-Za-z0-9_.-]+\.md)", path.read_text(errors="replace")):
                    named.setdefault(page, set()).add(str(path.relative_to(ROOT)))
    assert "REPEATABILITY.md" in named
    missing = {page: sorted(where) for page, where in named.items() if page not in outside
               and not (DOCS / page).exists()}
    assert missing == {}


# A code name in backticks: identifiers joined by dots (`analysis.forwards.ranges.forward_range`, `front.analyze`,
# `res.render()`); a file's name (`done.json`, `tune_text.py`) is none.
CODE_NAME = re.compile(r"`((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*)(?:\(\))?`")
FILE_SUFFIXES = {"py", "json", "md", "csv", "png", "sqlite", "gz", "txt", "html", "toml", "yml", "sh"}
# Names a page cites that are not the package's, by their first part.
NOT_THE_PACKAGES = {"res": "a result, as the examples name it", "EngineCore": "vLLM's engine core"}


def code_names(markdown: str) -> list[str]:
    """The code names a page cites (`CODE_NAME`), each once, in order; file names left out."""
    found = (m.group(1) for m in CODE_NAME.finditer(markdown))
    return list(dict.fromkeys(n for n in found if n.rsplit(".", 1)[1] not in FILE_SUFFIXES))


def defined_names(path: Path) -> set[str]:
    """What a module defines at its top (functions, classes, assignments, imports; the facade's lazy names) and its
    classes' members (`Class.member`)."""
    import ast

    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            if isinstance(node, ast.ClassDef):
                out |= {f"{node.name}.{n}" for n in defined_names_of(node.body)}
        else:
            out |= defined_names_of([node])
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets) and isinstance(node.value, ast.Dict):
            out |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return out


def defined_names_of(body: list) -> set[str]:
    import ast

    out: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def unresolved(names: list[str], package: Path) -> list[str]:
    """The `names` that name nothing in `package`: a name resolves when a module of the package ends with its first
    parts (`forwards.phases` is nsys_cc.analysis.forwards.phases; `nsys_cc.files` the package's own) and defines
    the rest (`ranges.forward_range`, `interleaved_run.Engine`, `Folder.lock` of a class), or when its first part is
    a class of the package with the second as a member."""
    root = package.parent
    mods = {".".join(p.relative_to(root).with_suffix("").parts[:-1] if p.name == "__init__.py"
                     else p.relative_to(root).with_suffix("").parts): p for p in package.rglob("*.py")}
    every = set().union(*(defined_names(p) for p in mods.values()))
    out = []
    for name in names:
        parts = name.split(".")
        if parts[0] in NOT_THE_PACKAGES or (len(parts) == 2 and name in every):
            continue
        found = False
        for k in range(len(parts), 0, -1):
            prefix, rest = ".".join(parts[:k]), ".".join(parts[k:])
            for mod, path in mods.items():
                if (mod == prefix or mod.endswith("." + prefix)) and (not rest or rest in defined_names(path)):
                    found = True
        if not found:
            out.append(name)
    return out


@pytest.mark.slow
def test_every_code_name_architecture_cites_exists():
    names = code_names((DOCS / "architecture.md").read_text())
    assert len(names) > 50 and "analysis.forwards.ranges.forward_range" in names
    assert unresolved(names, ROOT / "nsys_cc") == []


def test_the_code_name_check_finds_a_name_that_is_gone(tmp_path):
    pkg = tmp_path / "nsys_cc"
    (pkg / "analysis").mkdir(parents=True)
    (pkg / "__init__.py").write_text("_LAZY: dict = {'tune': ('nsys_cc.workflows.tune', 'tune')}\n")
    (pkg / "analysis" / "__init__.py").write_text("")
    (pkg / "analysis" / "sources.py").write_text("from x import y as z\nclass Run:\n    steps: int = 0\n"
                                                 "def decode_precision_of():\n    pass\n")
    page = ("`sources.decode_precision_of` `analysis.sources.Run.steps` `Run.steps` `nsys_cc.tune` `sources.z` "
            "`sources.gone` `nsys_cc.views` `views.render()` `res.render()` `done.json` `sources.py`")
    assert code_names(page) == ["sources.decode_precision_of", "analysis.sources.Run.steps", "Run.steps",
                                "nsys_cc.tune", "sources.z", "sources.gone", "nsys_cc.views", "views.render",
                                "res.render"]
    assert unresolved(code_names(page), pkg) == ["sources.gone", "nsys_cc.views", "views.render"]


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Second `-o` part\n\n[ok](a.md#second-o-part) [ok too](#a)\n")
    page = tmp_path / "b.md"
    page.write_text("[x](a.md#nope) [y](missing.md) `[z](in-code.md)` [w](https://example.com/x.md) [v](a.md)\n")
    assert broken_links(tmp_path / "a.md") == []
    assert broken_links(page) == ["a.md#nope (no such heading in a.md)", "missing.md (no such file)"]


# ---- the site ------------------------------------------------------------------------------------------------------


def test_every_page_is_in_the_navigation_and_every_entry_exists():
    nav = nav_pages(mkdocs_config()["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(set(nav)) == pages
    assert len(nav) == len(set(nav)), "a page is in the navigation twice"


def test_site_pages_links_resolve():
    broken = {str(p.relative_to(DOCS)): b for p in sorted(DOCS.rglob("*.md")) if (b := broken_links(p))}
    assert broken == {}


def test_docs_build_is_strict():
    config = mkdocs_config()
    assert config["strict"] is True
    assert all(level == "warn" for level in config["validation"].values())
    assert "mkdocs build --strict" in (ROOT / "Makefile").read_text()


def test_cli_reference_lists_every_verb_and_flag():
    # docs/cli.md rendered as the site renders it (its mkdocs-click directive), against the click commands themselves
    import click
    import markdown

    from nsys_cc.cli import cli

    extensions = ["mkdocs-click", "attr_list", "pymdownx.superfences"]
    html = markdown.markdown((DOCS / "cli.md").read_text(), extensions=extensions)
    assert len(cli.commands) >= 7 and "analyze" in cli.commands
    for name, command in cli.commands.items():
        assert f"nsys-cc {name} [OPTIONS]" in html, f"the CLI reference lacks `nsys-cc {name}`"
        assert isinstance(command, click.Command)
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                flag = max(param.opts, key=len)
                assert flag in html, f"the CLI reference lacks `nsys-cc {name} {flag}`"


def test_contract_table_matches_the_contract():
    # docs/plugin.md's table of the NVTX contract: each range the plugin writes, with its constant's value
    from nsys_cc import contract

    text = (DOCS / "plugin.md").read_text()
    names = [n for n in dir(contract) if n.endswith("_RANGE") or n.startswith("SCOPES_") and n != "SCOPES_STEP_PREFIX"]
    assert "FORWARD_RANGE" in names and "STEP_RANGE" in names
    for name in names:
        row = next((line for line in text.splitlines() if line.startswith("| ") and f"`{name}`" in line), None)
        assert row is not None, f"docs/plugin.md has no row for {name}"
        assert f"`{getattr(contract, name)}`" in row, f"docs/plugin.md: {name} is not {getattr(contract, name)!r}"


# ---- the strict build fails on what it should ------------------------------------------------------------------------


@pytest.mark.slow
def test_strict_build_fails_on_a_broken_link_and_anchor(tmp_path):
    # a copy of the site with one broken link and one broken anchor added: `mkdocs build` (as `make docs` runs it)
    # must fail and name both
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    (tmp_path / "nsys_cc").symlink_to(ROOT / "nsys_cc")
    page = tmp_path / "docs" / "kernels.md"
    page.write_text(page.read_text() + "\n[gone](no-such-page.md) [nowhere](speculative.md#no-such-anchor)\n")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    out = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")], cwd=tmp_path,
                         capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode != 0
    assert "no-such-page.md" in out.stderr and "no-such-anchor" in out.stderr
