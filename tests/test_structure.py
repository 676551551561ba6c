"""The shape of the house: floors you can see, imports that point down only (none in a
circle, TYPE_CHECKING imports included), small rooms, a thin CLI."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlax_trpo"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(module: str) -> bool:
    return (
        module.startswith("rlax_trpo")
        and PACKAGE.parent.joinpath(*module.split("."), "__init__.py").exists()
    )


def _face(package: str) -> dict[str, str]:
    """What a package's `__init__` (its face) gives each name: the module that defines it,
    whether the face imports it (`from module import name`) or loads it on first use (its
    `_EXPORTS = {name: module}` table); a name the face defines itself maps to the face."""
    init = PACKAGE.parent.joinpath(*package.split("."), "__init__.py")
    if not init.exists():
        return {}
    tree = ast.parse(init.read_text())
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update({a.asname or a.name: node.module for a in node.names})
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.setdefault(node.name, package)
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if targets == ["_EXPORTS"] and isinstance(node.value, ast.Dict):
                names.update(ast.literal_eval(node.value))
            for target in targets:
                names.setdefault(target, package)
    return names


def _provider(package: str, name: str, depth: int = 0) -> str | None:
    """The module that defines `name` as `from package import name` gets it, following
    faces that pass it on; None when the face does not give that name."""
    module = _face(package).get(name)
    if module is None or module == package or depth > 5:
        return module
    if _is_package(module):
        return _provider(module, name, depth + 1) or module  # a face passing it on
    return module


def _imports(path: Path, module: str | None = None) -> set[str]:
    """Every `rlax_trpo` module this file imports: at module level, inside functions and
    under `if TYPE_CHECKING:` alike (a type checker's import is a dependency too).
    `from package import module` depends on the module, not on the package's face;
    `from package import name` on the face and, through it, on the module that defines
    the name (a face's lazy `_EXPORTS` table included), so no circle hides behind a face."""
    tree = ast.parse(path.read_text())
    modules = set()
    package = module or _module_name(path)
    known = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                named = f"{base}.{alias.name}"
                if named in known:
                    modules.add(named)
                    continue
                modules.add(base)  # an attribute of `base`, not a module
                if _is_package(base):
                    modules.add(_provider(base, alias.name) or f"{base}:{alias.name}?")
    return {m for m in modules if m.startswith("rlax_trpo")}


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in _imports(path) if m in files and m != name}
        for name, path in files.items()
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A list of modules forming an import cycle (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, [*stack, nxt])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


def test_no_import_cycle_inside_the_package():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_name_imported_from_a_package_face_is_given_by_it():
    # `from rlax_trpo.pkg import Name` (under TYPE_CHECKING too) where the face gives no
    # `Name` would fail at run time, and hides the module the import really depends on.
    missing = sorted(
        f"{_module_name(path)}: {m.split(':')[1][:-1]} from {m.split(':')[0]}"
        for path in PACKAGE.rglob("*.py")
        for m in _imports(path)
        if m.endswith("?")
    )
    assert not missing, "names no package face gives:\n" + "\n".join(missing)


def test_the_cycle_check_sees_through_a_package_face(tmp_path):
    source = tmp_path / "x.py"
    # a name the face loads on first use depends on the module its table names
    source.write_text("from rlax_trpo.experiment import run\nfrom rlax_trpo import Config\n")
    found = _imports(source, "rlax_trpo.experiment.record")
    assert {"rlax_trpo.experiment.driver", "rlax_trpo.config.configuration"} <= found, found
    # record.py's old type import: the face gives no RunPlan at all
    source.write_text("if TYPE_CHECKING:\n    from rlax_trpo.experiment import RunPlan\n")
    assert "rlax_trpo.experiment:RunPlan?" in _imports(source, "rlax_trpo.experiment.record")
    # and the module defining RunPlan imports record (plan -> resume -> record): the circle
    # that import hid, found once the edge is drawn
    graph = _graph()
    graph["rlax_trpo.experiment.record"] |= {"rlax_trpo.experiment.plan"}
    cycle = _find_cycle(graph)
    assert cycle is not None and "rlax_trpo.experiment.record" in cycle, cycle


# The floors, ground first: a module may import its own floor and the floors below it, never
# one above. A name is a top-level module or a folder of the package.
FLOORS = [
    # the maths and the records: pure functions, no file I/O
    (
        "the ground",
        {
            "errors",
            "types",
            "advantages",
            "pbt",
            "losses",
            "trust_region",
            "normalization",
            "shuffle",
            "initializers",
            "layers",
            "memory",
            "small_linalg",
            "platform",
            "schedules",
        },
    ),
    ("environments", {"envs"}),
    ("configuration", {"config"}),
    ("networks and rollouts", {"networks", "rollout"}),
    ("algorithms", {"algorithms"}),
    ("the training loop", {"training", "evaluate", "policy"}),
    ("language models", {"lm"}),
    ("reports", {"report"}),
    ("a run on the host", {"experiment"}),
    ("the command line", {"cli", "__init__"}),
]  # fmt: skip (one row per floor reads as the plan)
TOP_LEVEL_MODULES = 20  # at most, `__init__` included


def _room(module: str) -> str:
    """The floor-map name of a module: its top-level module or folder under rlax_trpo."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _floor(module: str) -> int:
    room = _room(module)
    found = [i for i, (_, rooms) in enumerate(FLOORS) if room in rooms]
    assert found, f"{module}: its room {room!r} stands on no floor of FLOORS"
    return found[0]


def test_every_import_points_down_or_across():
    graph = _graph()
    up = sorted(
        f"{a} -> {b} ({FLOORS[_floor(a)][0]} -> {FLOORS[_floor(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if _floor(b) > _floor(a)
    )
    assert not up, "imports pointing up a floor:\n" + "\n".join(up)


def test_only_the_run_report_and_command_floors_import_them():
    allowed = {"experiment", "report", "cli", "__init__"}
    graph = _graph()
    found = sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if _room(b) in ("experiment", "report") and _room(a) not in allowed
    )
    assert not found, found


def test_the_top_level_is_small_and_every_room_has_a_floor():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, top
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    for room in [*top, *folders]:
        _floor(f"rlax_trpo.{room}")


def test_the_floor_check_sees_an_upward_import(tmp_path):
    # the check itself: a ground-floor module importing the run floor is reported
    assert _floor("rlax_trpo.experiment.driver") > _floor("rlax_trpo.losses")
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rlax_trpo.cli\n"
    )
    assert "rlax_trpo.cli" in _imports(source, "rlax_trpo.losses")


def test_algorithms_never_import_each_other():
    algorithms = PACKAGE / "algorithms"
    shared = {"__init__", "base", "common", "sections", "vine", "grouped"}
    methods = {p.stem for p in algorithms.glob("*.py")} - shared
    for name in methods:
        imported = _imports(algorithms / f"{name}.py")
        others = {f"rlax_trpo.algorithms.{m}" for m in methods - {name}}
        assert not (imported & others), (name, imported & others)


def test_small_rooms_and_a_thin_cli():
    sizes = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_big = {str(p.relative_to(ROOT)): n for p, n in sizes.items() if n > 350}
    assert not too_big, too_big
    assert len((ROOT / "train.py").read_text().splitlines()) <= 200


# Functions allowed over LONGEST lines of their own, each with the reason; at most three,
# none over LONGEST_EXCEPTION lines. Empty: every function fits.
LONG_FUNCTIONS: dict[str, str] = {}
LONGEST, LONGEST_EXCEPTION = 60, 90


def _own_lengths(source: str) -> dict[str, int]:
    """Every function's own length: its lines from `def` to its end, less the lines of the
    functions defined inside it (each measured on its own), keyed `outer.inner` by name."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = set(range(child.lineno, child.end_lineno + 1))
                for inner in ast.walk(child):
                    if inner is not child and isinstance(
                        inner, (ast.FunctionDef, ast.AsyncFunctionDef)
                    ):
                        start = min([inner.lineno, *(d.lineno for d in inner.decorator_list)])
                        lines -= set(range(start, inner.end_lineno + 1))
                name = f"{prefix}{child.name}"
                lengths[name] = max(lengths.get(name, 0), len(lines))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def _package_function_lengths() -> dict[str, int]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for name, n in _own_lengths(path.read_text()).items():
            out[f"{module}.{name}"] = n
    return out


def test_function_length_counts_a_closure_apart_from_its_factory():
    source = "def make():\n    x = 1\n\n    def inner():\n        return x\n\n    return inner\n"
    assert _own_lengths(source) == {"make": 5, "make.inner": 2}
    method = "class A:\n    def f(self):\n        a = 1\n        return a\n"
    assert _own_lengths(method) == {"A.f": 3}


def test_no_long_functions():
    lengths = _package_function_lengths()
    too_long = {
        name: n for name, n in lengths.items() if n > LONGEST and name not in LONG_FUNCTIONS
    }
    assert not too_long, f"functions over {LONGEST} lines of their own: {too_long}"
    assert len(LONG_FUNCTIONS) <= 3, LONG_FUNCTIONS
    for name, reason in LONG_FUNCTIONS.items():
        assert reason.strip(), f"{name}: say why it is long"
        assert LONGEST < lengths.get(name, 0) <= LONGEST_EXCEPTION, (name, lengths.get(name))


def test_the_run_driver_does_not_ask_what_kind_of_run_it_drives():
    # Whatever differs between a control run and a language-model run, the Program says.
    tree = ast.parse((PACKAGE / "experiment" / "driver.py").read_text())
    asked = [
        f"{node.func.id} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("isinstance", "getattr", "hasattr")
    ]
    assert not asked, asked


def test_ci_holds_the_style_and_the_package_bends_no_formatting():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "ruff check ." in ci and "ruff format --check ." in ci
    skipped = {
        str(p.relative_to(ROOT)): p.read_text().count("fmt: skip") for p in PACKAGE.rglob("*.py")
    }
    assert sum(skipped.values()) <= 5, {k: v for k, v in skipped.items() if v}
    for path in PACKAGE.rglob("*.py"):
        for line in path.read_text().splitlines():
            if "fmt: skip" in line:  # each one says why
                assert line.split("fmt: skip", 1)[1].strip(), f"{path}: {line.strip()}"


def test_the_driver_stage_table_names_modules_and_records_that_exist():
    import re

    doc = ast.get_docstring(ast.parse((PACKAGE / "experiment" / "driver.py").read_text()))
    table = doc.split("plan_run", 1)[1]
    refs = re.findall(r"\(`([a-z_]+)(?:\.([A-Za-z_]+))?`\)", table)
    assert len(refs) >= 8, refs
    for module, name in refs:
        path = PACKAGE / "experiment" / f"{module}.py"
        assert path.exists(), f"driver's stage table names rlax_trpo.experiment.{module}"
        if name:
            defined = {
                n.name
                for n in ast.parse(path.read_text()).body
                if isinstance(n, (ast.ClassDef, ast.FunctionDef))
            }
            assert name in defined, f"driver's stage table: {module} defines no {name}"
