"""Imports point one way: the import graph of gormes follows its layer order.

Every module under gormes/ is parsed with `ast`; every import of a gormes module
(at module level, under `if TYPE_CHECKING:`, or inside a function) is an arrow
from the importing package to the imported one. The test fails, naming file,
line and both layers, on:

- an arrow that points up the layer order below;
- an import cycle between packages (through any kind of import: a cycle that a
  function-local import hides is still a cycle);
- a function-local import across packages with no comment saying why it is lazy
  (start-up time, an optional dependency) on its line or above it: the line above,
  or above the run of imports it belongs to (one comment may explain several);
- a module that belongs to no package listed here: a new one is placed on purpose.

Within one package imports are free. An import under `TYPE_CHECKING` counts like
any other: an annotation that names a module above is still a dependency on it.
Modules imported by name at run time (`importlib`: the CLI's command table, the
event catalog, `--import` handler modules) are not seen; each of those points down
or stays inside its package.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gormes"

# Lowest first. Each layer may import the layers before it and its own; a name is a
# package (with every module under it) or a single module. Packages in one layer
# may use each other as long as no cycle forms.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("printable", "out_file", "logging_setup", "systemd", "data", "settings"),
    ("events",),
    ("projections",),
    ("actors",),  # actor.py, runtime.py: the actor model and its runtime
    ("actors.jobs",),
    ("actors.cron",),  # a cron occurrence is submitted as a job
    ("ops",),
    ("providers",),
    ("control",),  # budgets, rate limits, the outage guard: asked before a model turn
    ("actors.runs",),
    ("contained", "recall", "skillbook", "memory", "knowledge"),  # what the tools use
    ("tools",),
    ("actors.agent_jobs",),
    ("health", "doctor", "audit_export", "audit_unfinished", "audit_taxonomy", "migrate", "dashboard",
     "demo", "demo_jobs", "demo_runs", "demo_tools", "telemetry"),
    ("daemon", "mcp_server", "mcp_frames"),
    ("cli", "__main__", ""),  # "" is gormes/__init__.py, the public face
)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. "gormes.actors.jobs.worker"
    target: str  # the imported gormes module
    path: Path
    line: int
    local: bool  # inside a function
    type_checking: bool  # under `if TYPE_CHECKING:`
    commented: bool  # a comment on it, or above it within its run of imports

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def package_of(module: str) -> str | None:
    """The listed package (or module) that `module` belongs to, as written in LAYERS."""
    name = module.removeprefix("gormes").removeprefix(".")
    listed = {unit for layer in LAYERS for unit in layer}
    best = None
    for unit in listed:
        if name == unit or (unit and name.startswith(unit + ".")) or (not unit and not name):
            if best is None or len(unit) > len(best):
                best = unit
    return best


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def resolve(name: str) -> str:
    """The module an imported dotted name lives in (`gormes.x.Name` -> `gormes.x`)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name


def comment_lines(source: str) -> set[int]:
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.add(token.start[0])
    return lines


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str, path: Path) -> list[Import]:
    source = path.read_text()
    comments = comment_lines(source)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [resolve(alias.name) for alias in node.names if alias.name.split(".")[0] == "gormes"]
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        if base.split(".")[0] != "gormes":
            return []
        # `from gormes.x import y` imports the module gormes.x.y when there is one.
        return [resolve(f"{base}.{alias.name}") for alias in node.names]

    def visit(node: ast.AST, local: bool, type_checking: bool, block_start: int = 0) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            end = node.end_lineno or node.lineno
            # A comment on the import or above it, up to the line above the run of
            # imports it belongs to: one comment may explain several imports.
            first = min(block_start or node.lineno, node.lineno)
            commented = any(line in comments for line in range(first - 1, end + 1))
            for target in targets(node):
                found.append(Import(module, target, path, node.lineno, local, type_checking, commented))
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local = True
        if isinstance(node, ast.If) and is_type_checking(node.test):
            visit_body(node.body, local, True)
            visit_body(node.orelse, local, type_checking)
            return
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                visit_body(value, local, type_checking)
            elif isinstance(value, ast.AST):
                visit(value, local, type_checking)

    def visit_body(nodes: list[ast.AST], local: bool, type_checking: bool) -> None:
        block_start, previous = 0, None
        for child in nodes:
            if not isinstance(child, ast.AST):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not isinstance(previous, (ast.Import, ast.ImportFrom)):
                block_start = child.lineno
            visit(child, local, type_checking, block_start)
            previous = child

    visit(ast.parse(source, str(path)), False, False)
    return found


@cache
def all_imports() -> tuple[Import, ...]:
    return tuple(found for module, path in modules().items() for found in imports_of(module, path))


def across(found: Import) -> tuple[str, str] | None:
    """The two packages an import joins, or None when it stays inside one."""
    source, target = package_of(found.source), package_of(found.target)
    if source is None or target is None or source == target:
        return None
    return source, target


def show(unit: str) -> str:
    return f"{unit or 'gormes (__init__)'} (layer {layer_of(unit)})"


def upward_imports() -> list[str]:
    problems: dict[str, None] = {}  # in order, each once (`from x import a, b` is one line)
    for found in all_imports():
        pair = across(found)
        if pair and layer_of(pair[1]) > layer_of(pair[0]):
            kind = " (TYPE_CHECKING)" if found.type_checking else " (function-local)" if found.local else ""
            problems[f"{found.where}: {show(pair[0])} imports {found.target}{kind}, "
                     f"which is in {show(pair[1])}, above it"] = None
    return list(problems)


def package_graph() -> dict[str, dict[str, Import]]:
    graph: dict[str, dict[str, Import]] = {}
    for found in all_imports():
        pair = across(found)
        if pair:
            graph.setdefault(pair[0], {}).setdefault(pair[1], found)
    return graph


def cycles(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def package_cycles() -> list[str]:
    graph = package_graph()
    problems = []
    for component in cycles(graph):
        arrows = [f"{graph[a][b].where}: {a or 'gormes'} -> {b or 'gormes'}"
                  for a in component for b in component if b in graph.get(a, {})]
        problems.append("cycle between " + ", ".join(show(unit) for unit in component)
                        + ":\n    " + "\n    ".join(arrows))
    return problems


def unexplained_lazy_imports() -> list[str]:
    return list(dict.fromkeys(
        f"{found.where}: function-local import of {found.target} into {found.source} "
        "with no comment saying why it is lazy"
        for found in all_imports() if found.local and across(found) and not found.commented))


def unplaced_modules() -> list[str]:
    problems = [f"{path.relative_to(ROOT)}: {module} is in no package of LAYERS"
                for module, path in modules().items() if package_of(module) is None]
    # A package split into listed sub-packages (actors/) must list every one of them.
    listed = {unit for layer in LAYERS for unit in layer}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        module = module_name(init)
        unit, parent = module.removeprefix("gormes").removeprefix("."), package_of(module)
        if unit in listed or not parent:
            continue
        if any(other.startswith(parent + ".") for other in listed):
            problems.append(f"{init.parent.relative_to(ROOT)}: a sub-package of {parent}, "
                            "whose rooms are listed, so it must be listed too")
    return problems


def test_every_module_is_placed_in_a_layer() -> None:
    assert unplaced_modules() == []


def test_every_listed_package_exists() -> None:
    names = {module.removeprefix("gormes").removeprefix(".") for module in modules()}
    missing = [unit for layer in LAYERS for unit in layer if unit not in names]
    assert missing == []


def test_no_import_points_up_the_layers() -> None:
    assert upward_imports() == []


def test_no_import_cycle_between_packages() -> None:
    assert package_cycles() == []


def test_every_lazy_import_across_packages_says_why() -> None:
    assert unexplained_lazy_imports() == []


def test_the_parser_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The parser sees each kind of import the checks count."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from gormes.events import codec\n"
        "import gormes.ops.spec\n"
        "if TYPE_CHECKING:\n"
        "    from gormes.tools.builtin import default_registry\n"
        "def f():\n"
        "    from gormes.cli import main\n"
        "    # lazy: start-up time\n"
        "    from gormes.daemon import Daemon\n"
        "    import gormes.mcp_server\n"
        "    f()\n"
        "    import gormes.doctor\n"
    )
    found = {(i.target, i.local, i.type_checking, i.commented)
             for i in imports_of("gormes.actors.jobs.sample", sample)}
    assert found == {
        ("gormes.events.codec", False, False, False),
        ("gormes.ops.spec", False, False, False),
        ("gormes.tools.builtin", False, True, False),
        ("gormes.cli.main", True, False, False),
        ("gormes.daemon", True, False, True),
        ("gormes.mcp_server", True, False, True),  # in the run of imports the comment opens
        ("gormes.doctor", True, False, False),
    }
    assert package_of("gormes.actors.jobs.sample") == "actors.jobs"
    assert package_of("gormes.actors.runtime") == "actors"
    assert package_of("gormes") == ""
    assert cycles({"a": {"b": None}, "b": {"a": None}, "c": {"a": None}}) == [["a", "b"]]  # type: ignore[dict-item]


def test_the_checks_fail_on_a_tree_that_breaks_them(tmp_path: Path, monkeypatch) -> None:
    files = {
        "__init__.py": "",
        "errors.py": "",
        "newthing.py": "",
        "events/__init__.py": "from gormes.cli import main\n",
        "cli/__init__.py": "",
        "cli/main.py": "import gormes.events\n",
        "ops/__init__.py": "def f():\n    from gormes.events import x\n",
        "actors/__init__.py": "",
        "actors/rooms/__init__.py": "",
    }
    for name, text in files.items():
        path = tmp_path / "gormes" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "gormes")
    modules.cache_clear()
    all_imports.cache_clear()
    try:
        assert upward_imports() == [
            f"gormes/events/__init__.py:1: {show('events')} imports gormes.cli.main, "
            f"which is in {show('cli')}, above it"]
        assert package_cycles() == [
            f"cycle between {show('cli')}, {show('events')}:\n"
            "    gormes/cli/main.py:1: cli -> events\n"
            "    gormes/events/__init__.py:1: events -> cli"]
        assert unexplained_lazy_imports() == [
            "gormes/ops/__init__.py:2: function-local import of gormes.events into gormes.ops "
            "with no comment saying why it is lazy"]
        assert unplaced_modules() == [
            "gormes/newthing.py: gormes.newthing is in no package of LAYERS",
            "gormes/actors/rooms: a sub-package of actors, whose rooms are listed, so it must be listed too"]
    finally:
        modules.cache_clear()
        all_imports.cache_clear()
