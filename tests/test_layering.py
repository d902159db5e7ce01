"""The import structure: layers, circles and private names, read with ``ast`` from the sources.

Layers, lowest first: ``runtime`` <- ``memory`` <- ``actors`` <- ``actors.cli``. A module may
import its own layer and the ones below, never one above. No module imports a private name
(``_x``) of another module, and there is no circle: neither between modules (every import
counts, also one inside a function or under ``TYPE_CHECKING``) nor between sub-packages (a
sub-package's ``__init__`` may re-export its modules, so a circle of sub-packages is a circle of
imports waiting to happen). No module re-exports another's names: every name in a module's
``__all__`` is defined there (assigned, ``def`` or ``class``), so each name has one import path.
No module is over :data:`MAX_LINES` lines.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("runtime", "memory", "actors")
#: (prefix, layer): the longest matching prefix decides a module's layer.
LAYERS = (("runtime", 0), ("memory", 1), ("actors", 2), ("actors.cli", 3))
LAYER_NAMES = {0: "runtime", 1: "memory", 2: "actors", 3: "actors.cli"}
#: the longest a module of the packages may be
MAX_LINES = 400


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path) -> dict[str, Path]:
    """Every module of the project's packages: dotted name -> file."""
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imports_of(
    name: str, path: Path, modules: Mapping[str, Path]
) -> list[tuple[str, tuple[str, ...], int]]:
    """``(imported module, names taken from it, line)`` for every project import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, tuple[str, ...], int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    out.append((alias.name, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target not in modules:
                continue
            taken: list[str] = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:  # ``from pkg import module``
                    out.append((sub, (), node.lineno))
                else:
                    taken.append(alias.name)
            if taken:
                out.append((target, tuple(taken), node.lineno))
    return out


def defined_names(tree: ast.Module) -> set[str]:
    """Names a module's top level binds itself: assignments, ``def`` and ``class`` (also inside
    a top-level ``if``/``try``); imports do not count."""
    out: set[str] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try)):
            stack.extend([*node.body, *node.orelse])
            if isinstance(node, ast.Try):
                stack.extend(node.finalbody)
                for handler in node.handlers:
                    stack.extend(handler.body)
    return out


def exported_names(tree: ast.Module) -> list[str]:
    """The string names of a module's ``__all__`` (an empty list without one)."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and isinstance(
            value, (ast.List, ast.Tuple)
        ):
            consts = [e for e in value.elts if isinstance(e, ast.Constant)]
            return [e.value for e in consts if isinstance(e.value, str)]
    return []


def module_problems(name: str, path: Path, root: Path) -> list[str]:
    """A re-export in ``__all__`` and a module over :data:`MAX_LINES` lines."""
    text = path.read_text(encoding="utf-8")
    out: list[str] = []
    tree = ast.parse(text, str(path))
    defined = defined_names(tree)
    foreign = [n for n in exported_names(tree) if n not in defined]
    if foreign:
        out.append(
            f"{path.relative_to(root)}: {name} exports {', '.join(foreign)} "
            "not defined there (import it from its defining module)"
        )
    lines = len(text.splitlines())
    if lines > MAX_LINES:
        out.append(f"{path.relative_to(root)}: {lines} lines, over {MAX_LINES}")
    return out


def layer_of(module: str) -> int:
    best = -1
    layer = 0
    for prefix, value in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
            best, layer = len(prefix), value
    return layer


def subpackage_of(module: str, modules: Mapping[str, Path]) -> str:
    """The module's sub-package (``memory.patterns``); a module at a package's top level
    (``memory.untrusted``) or a top-level package is a node of its own."""
    parts = module.split(".")
    if len(parts) >= 2 and modules.get(".".join(parts[:2]), Path()).name == "__init__.py":
        return ".".join(parts[:2])
    return module


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One circle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def problems(root: Path) -> list[str]:
    """Every layering problem of the tree at ``root``, one line each."""
    modules = find_modules(root)
    out: list[str] = []
    module_graph: dict[str, set[str]] = {m: set() for m in modules}
    package_graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        out.extend(module_problems(name, path, root))
        for target, taken, line in imports_of(name, path, modules):
            where = f"{path.relative_to(root)}:{line}"
            if target == name:
                continue
            module_graph[name].add(target)
            if layer_of(target) > layer_of(name):
                out.append(
                    f"{where}: {name} ({LAYER_NAMES[layer_of(name)]}) imports {target} "
                    f"({LAYER_NAMES[layer_of(target)]}), a higher layer"
                )
            private = [t for t in taken if t.startswith("_") and not t.startswith("__")]
            if private:
                out.append(f"{where}: {name} imports private {', '.join(private)} of {target}")
            src, dst = subpackage_of(name, modules), subpackage_of(target, modules)
            if src != dst and "." in src and "." in dst:  # top-level packages are no node
                package_graph.setdefault(src, set()).add(dst)
    cycle = find_cycle(module_graph)
    if cycle:
        out.append("module circle: " + " -> ".join(cycle))
    cycle = find_cycle(package_graph)
    if cycle:
        out.append("sub-package circle: " + " -> ".join(cycle))
    return out


def test_the_project_has_no_layering_problem() -> None:
    assert problems(ROOT) == []


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


_CLEAN = {
    "runtime/__init__.py": "",
    "runtime/db.py": "X = 1\n",
    "memory/__init__.py": "",
    "memory/a/__init__.py": "",
    "memory/a/one.py": "from runtime.db import X\n",
    "memory/b/__init__.py": "",
    "memory/b/two.py": "from memory.a import one\n",
    "actors/__init__.py": "",
    "actors/system.py": "from memory.b.two import one\n",
    "actors/cli/__init__.py": "",
    "actors/cli/main.py": "from actors import system\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    _write(tmp_path, _CLEAN)
    assert problems(tmp_path) == []


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        # a module circle, held by a function-local import
        (
            {
                "memory/a/one.py": "def f():\n    from memory.a import three\n",
                "memory/a/three.py": "from memory.a.one import f\n",
            },
            "module circle: memory.a.one -> memory.a.three -> memory.a.one",
        ),
        # a circle held by TYPE_CHECKING
        (
            {
                "memory/a/three.py": "from memory.a.four import Y\n",
                "memory/a/four.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from memory.a.three import Z\nY = 1\n",
            },
            "module circle: memory.a.four -> memory.a.three -> memory.a.four",
        ),
        # an arrow up: memory imports actors
        (
            {"memory/a/one.py": "from actors.system import one\n"},
            "memory.a.one (memory) imports actors.system (actors), a higher layer",
        ),
        # actors imports the CLI
        (
            {"actors/system.py": "from actors.cli.main import system\n"},
            "actors.system (actors) imports actors.cli.main (actors.cli), a higher layer",
        ),
        # a private name across modules
        (
            {"memory/b/two.py": "from memory.a.one import _helper\n"},
            "memory.b.two imports private _helper of memory.a.one",
        ),
        # a module at a package's top level and a sub-package that need each other
        (
            {
                "memory/shared.py": "from memory.a.one import X\n",
                "memory/a/one.py": "from memory.shared import Y\nX = 1\n",
            },
            "sub-package circle: memory.a -> memory.shared -> memory.a",
        ),
        # a module re-exports a name it imported (``__all__`` names what is defined elsewhere)
        (
            {"memory/b/two.py": 'from memory.a.one import X\n__all__ = ["X", "Y"]\nY = 1\n'},
            "memory.b.two exports X not defined there",
        ),
        # a module over the size limit
        (
            {"memory/a/one.py": "from runtime.db import X\n" + "Y = X\n" * MAX_LINES},
            f"memory/a/one.py: {MAX_LINES + 1} lines, over {MAX_LINES}",
        ),
        # sub-packages that need each other
        (
            {"memory/a/one.py": "from memory.b.three import Z\n", "memory/b/three.py": "Z = 1\n"},
            "sub-package circle: memory.b -> memory.a -> memory.b",
        ),
    ],
)
def test_a_planted_problem_is_found(tmp_path: Path, planted: dict[str, str], expected: str) -> None:
    _write(tmp_path, {**_CLEAN, **planted})
    found = problems(tmp_path)
    assert any(expected in line for line in found), found


def test_every_package_says_what_it_is_for_and_its_public_names_exist() -> None:
    """Each ``__init__.py`` has a docstring; every ``module.name`` it lists as public exists."""
    missing: list[str] = []
    for init in sorted(ROOT.glob("*/**/__init__.py")):
        if init.parts[len(ROOT.parts)] not in (*PACKAGES, "migrations"):
            continue
        tree = ast.parse(init.read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree)
        if not doc:
            missing.append(f"{init.relative_to(ROOT)}: no docstring")
            continue
        public = doc.partition("Public:")[2].partition("\n\n")[0]
        for ref in re.findall(r"``([\w.]+)``", public):
            module, _, name = ref.partition(".")
            path = init.parent / f"{module}.py"
            if not path.exists():
                missing.append(f"{init.relative_to(ROOT)}: no module {module}")
            elif name and not re.search(
                rf"^(?:async def|def|class) {name}\b|^{name}\b[^=\n]*=", path.read_text(), re.M
            ):
                missing.append(f"{init.relative_to(ROOT)}: {module} has no {name}")
    assert missing == []


def test_every_file_the_readme_names_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:runtime|actors|memory|tests|bench|migrations)/[\w/.]*)`", readme))
    named |= set(re.findall(r"\b((?:runtime|actors|memory|tests|bench)/[\w/]+\.py)\b", readme))
    assert named, "the README names no file"
    assert sorted(p for p in named if "NNN" not in p and not (ROOT / p).exists()) == []
