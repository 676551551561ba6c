"""The documents name the package as it is: docs/layout.md lists every module on the floor
the house test puts it on, and every module path or dotted name the README and docs cite
exists, so the pages cannot go stale without a test failing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_structure import FLOORS, PACKAGE, _floor, _module_name

ROOT = PACKAGE.parent
LAYOUT = ROOT / "docs" / "layout.md"
# Dotted names in the docs that are not Python modules.
NOT_MODULES = {
    "rlax_trpo.plugins": "the entry-point group plugins register under (pyproject.toml)",
}


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _layout_floors() -> dict[str, str]:
    """module path -> the floor heading it is listed under in docs/layout.md."""
    listed, floor = {}, None
    for line in LAYOUT.read_text().splitlines():
        heading = re.match(r"^## Floor (\d+): (.+)$", line)
        if heading:
            floor = heading.group(2)
            assert FLOORS[int(heading.group(1)) - 1][0] == floor, line
        for path in re.findall(r"`(rlax_trpo/[\w/]+\.py)`", line):
            assert floor is not None, f"{path} listed before any floor"
            assert path not in listed, f"{path} listed twice"
            listed[path] = floor
    return listed


def test_the_layout_page_lists_every_module_on_its_floor():
    listed = _layout_floors()
    modules = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")}
    assert sorted(set(listed) - modules) == [], "listed, but not in the package"
    assert sorted(modules - set(listed)) == [], "in the package, not listed in docs/layout.md"
    for path, floor in listed.items():
        module = _module_name(ROOT / path)
        assert FLOORS[_floor(module)][0] == floor, (path, floor)


def _defined(path: Path) -> set[str]:
    """The names a module defines or imports at its top level (a lazy face's exports too)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets):
                names.update(ast.literal_eval(node.value))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _stale(dotted: str, modules: dict[str, Path]) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in modules:
            rest = parts[k:]
            return bool(rest) and rest[0] not in _defined(modules[".".join(parts[:k])])
    return True


def test_every_module_the_documents_cite_exists():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    stale = []
    for doc in _documents():
        text = doc.read_text()
        for path in sorted(set(re.findall(r"\brlax_trpo/[\w/]+\.py\b", text))):
            if not (ROOT / path).is_file():
                stale.append(f"{doc.relative_to(ROOT)}: {path}")
        for dotted in sorted(set(re.findall(r"\brlax_trpo(?:\.[A-Za-z_]\w*)+", text))):
            if dotted not in NOT_MODULES and _stale(dotted, modules):
                stale.append(f"{doc.relative_to(ROOT)}: {dotted}")
    assert not stale, "the documents cite what the package does not have:\n" + "\n".join(stale)


def test_the_citation_check_sees_a_stale_name():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    assert not _stale("rlax_trpo.networks.policy_on", modules)
    assert not _stale("rlax_trpo.run", modules)  # a lazy export of the package's face
    assert _stale("rlax_trpo.checkpoint", modules)  # moved to rlax_trpo.experiment
    assert _stale("rlax_trpo.networks.no_such_function", modules)
