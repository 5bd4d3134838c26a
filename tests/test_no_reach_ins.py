"""No private reach-ins: a module uses another module's underscored names only
through what that module makes public.

Every module under gormes/ is parsed with `ast`. The test fails, naming file and
line, on:

- an attribute `<expr>._name` whose `_name` the module does not define itself (as
  a function, class or method, a class-level name, an attribute it assigns, or a
  `__slots__` entry) when `<expr>` is not `self`, `cls`, `super()` or an instance
  a classmethod just made with `cls(...)` (all the class's own). So
  `ctx._queue.store` or `queue._submit(...)` fail in a module that does not define
  `_queue` or `_submit`, while a class of one module may use another's private
  members in that same module (`Worker` and its `_Refill`), and a subclass its
  base's through `self`.
- `from gormes.<package>.<module> import _name` from outside that package: a
  package's modules may share an underscored helper; other packages may not.

Dunder names (`__struct_fields__`) are public protocol. The few underscored names
that are a library's public API are listed in ALLOWED, each with its reason.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gormes"

# (the expression's source or "*" for any, the attribute): why it is not a reach-in.
ALLOWED: dict[tuple[str, str], str] = {
    ("os", "_exit"): "the standard library's exit without clean-up: public, underscored to warn",
    ("*", "_replace"): "a namedtuple's public method (underscored so that no field can clash)",
    ("re2", "_Regexp"): "google-re2 names its compiled pattern type nowhere else (for an annotation)",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_private_names(tree: ast.AST) -> set[str]:
    """The underscored names a module defines: its functions, classes and methods,
    class-level and `__slots__` names, and every attribute it assigns."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)  # a class-level name (and module-level ones: harmless)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets) and node.value:
                names.update(
                    c.value for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    return {name for name in names if _private(name)}


def _instances_made(fn: ast.AST) -> set[str]:
    """The names a function binds to `cls(...)`: its own class's new instance."""
    return {
        target.id
        for node in ast.walk(fn) if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "cls"
        for target in node.targets if isinstance(target, ast.Name)
    }


def _exempt(value: ast.expr, instances: set[str]) -> bool:
    """`self`, `cls`, `super()`, or an instance its class's classmethod just made:
    the class's own members, inherited ones included."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls") or value.id in instances
    return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id == "super")


def reach_ins(where: str, tree: ast.AST) -> list[tuple[int, str]]:
    own = own_private_names(tree)
    found = []

    def visit(node: ast.AST, instances: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            instances = instances | _instances_made(node)
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own \
                and not _exempt(node.value, instances):
            source = ast.unparse(node.value)
            if (source, node.attr) not in ALLOWED and ("*", node.attr) not in ALLOWED:
                found.append((node.lineno, f"{where}:{node.lineno}: {source}.{node.attr}, "
                                           "private to another module"))
        for child in ast.iter_child_nodes(node):
            visit(child, instances)

    visit(tree, set())
    return found


def _package_dir(module: str, root: Path) -> Path | None:
    """The directory of the package `module` (a gormes module) belongs to."""
    path = root.joinpath(*module.split("."))
    if path.is_dir():
        return path
    if path.with_suffix(".py").is_file():
        return path.parent
    return None


def private_imports(where: str, path: Path, tree: ast.AST, root: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module.split(".")[0] != "gormes":
            continue
        home = _package_dir(node.module, root)
        for alias in node.names:
            if _private(alias.name) and home != path.parent:
                found.append((node.lineno, f"{where}:{node.lineno}: imports {alias.name} from "
                                           f"{node.module}, private to another package"))
    return found


def problems(package: Path = PACKAGE) -> list[str]:
    root = package.parent
    out: list[str] = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = str(path.relative_to(root))
        found = reach_ins(where, tree) + private_imports(where, path, tree, root)
        out += [text for _, text in sorted(set(found))]
    return out


def test_no_module_reaches_into_another_modules_private_names() -> None:
    assert problems() == []


def test_the_check_fails_on_reach_ins_and_passes_what_is_allowed(tmp_path: Path) -> None:
    files = {
        "gormes/__init__.py": "",
        "gormes/jobs/__init__.py": "",
        "gormes/jobs/queue.py": "def _helper(): ...\n",
        "gormes/jobs/batch.py": "from gormes.jobs.queue import _helper\n",  # same package: fine
        "gormes/bridge/__init__.py": "",
        "gormes/bridge/handler.py": textwrap.dedent("""\
            import os
            from gormes.jobs.queue import _helper
            class Here:
                __slots__ = ("_slot",)
                def _mine(self): ...
                def use(self, ctx, queue, other):
                    self._anything()
                    super()._base()
                    other._mine()
                    other._slot
                    ctx._queue.store
                    queue._submit()
                    os._exit(1)
                    other._replace(a=1)
                @classmethod
                def open(cls):
                    made = cls()
                    made._base_setup()
            """),
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert problems(tmp_path / "gormes") == [
        "gormes/bridge/handler.py:2: imports _helper from gormes.jobs.queue, private to another package",
        "gormes/bridge/handler.py:11: ctx._queue, private to another module",
        "gormes/bridge/handler.py:12: queue._submit, private to another module",
    ]
