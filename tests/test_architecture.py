"""The arrows of docs/architecture.md hold: every import of every module of the package (lazy imports inside
functions and ``TYPE_CHECKING`` blocks included) goes from its part to a part that part may import, and no modules
import each other in a cycle (a cycle "closed" by a lazy import is still a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentgym_r1"
DOC = ROOT / "docs" / "architecture.md"

# part -> the parts it may import (itself always). "error" is agentgym_r1/error.py, which every part may import;
# "root" is agentgym_r1/__init__.py (``import agentgym_r1`` registers the env ids); "cli" is agentgym_r1/cli.py.
ALLOWED: dict[str, set[str]] = {
    "error": set(),
    "core": {"error"},
    "retrieval": {"error", "core"},
    "envs": {"error", "core", "retrieval"},
    "root": {"error", "core", "envs"},
    "serve": {"error", "core", "retrieval", "envs", "root"},
    "adapters": {"error", "core"},
    "trainers": {"error", "core", "adapters", "root"},
    "leaderboard": {"error", "core", "retrieval", "envs", "adapters", "trainers", "root"},
    "cli": {"error", "core", "retrieval", "envs", "serve", "adapters", "trainers", "leaderboard", "root"},
    "testing": {"error", "core", "retrieval", "envs", "serve", "adapters", "trainers", "leaderboard", "root"},
}
PARTS = ("core", "retrieval", "envs", "serve", "adapters", "trainers", "leaderboard", "testing")


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def part_of(module: str) -> str:
    """The part a module of the package belongs to (see ALLOWED)."""
    names = module.split(".")
    if len(names) == 1:
        return "root"
    if names[1] in PARTS:
        return names[1]
    if names[1] in ("error", "cli"):
        return names[1]
    raise AssertionError(f"{module} belongs to no part: add its part to ALLOWED and to docs/architecture.md")


def imports(path: Path, module: str, known: dict[str, Path]) -> list[tuple[str, int]]:
    """``(imported module of the package, line)`` for every import statement in ``path``, at any depth."""
    is_package = path.name == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "agentgym_r1"]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                if node.level
                else (node.module or "")
            )
            if base.split(".")[0] != "agentgym_r1":
                continue
            # ``from pkg import submodule`` imports the submodule; ``from module import name`` the module
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            found += [(s, node.lineno) for s in subs] or [(base, node.lineno)]
    return found


def forbidden_imports(package: Path) -> list[str]:
    known = modules(package)
    bad = []
    for module, path in known.items():
        source = part_of(module)
        for target, line in imports(path, module, known):
            wanted = part_of(target)
            if wanted != source and wanted not in ALLOWED[source]:
                bad.append(f"{path.relative_to(package.parent)}:{line}: {source} -> {wanted} ({target})")
    return bad


def import_cycles(package: Path) -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan's algorithm, iterative); an import of a module's own parent
    package is left out (Python imports a parent package before its submodules anyway)."""
    known = modules(package)
    graph = {
        m: sorted({t for t, _ in imports(p, m, known) if t in known and t != m and not m.startswith(t + ".")})
        for m, p in known.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_every_import_follows_an_allowed_arrow() -> None:
    bad = forbidden_imports(PACKAGE)
    assert not bad, "imports against docs/architecture.md:\n" + "\n".join(bad)


def test_no_modules_import_each_other() -> None:
    cycles = import_cycles(PACKAGE)
    assert not cycles, "import cycles (move the factory up a level):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_package_never_imports_its_test_kits() -> None:
    known = modules(PACKAGE)
    users = [
        f"{m} -> {t}"
        for m, p in known.items()
        if part_of(m) != "testing"
        for t, _ in imports(p, m, known)
        if part_of(t) == "testing"
    ]
    assert not users, users


def test_the_document_states_the_arrows_the_test_checks() -> None:
    """docs/architecture.md's table lists, for each part, exactly the parts ALLOWED lets it import."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0] in ALLOWED:
            rows[cells[0]] = {c.strip().strip("`") for c in cells[2].split(",") if c.strip() not in ("", "nothing")}
    assert rows == ALLOWED, f"docs/architecture.md says {rows}, the test checks {ALLOWED}"


def test_the_checker_sees_lazy_and_relative_imports(tmp_path) -> None:
    """A forbidden import inside a function, and a relative one, are both found (the checker can fail)."""
    package = tmp_path / "agentgym_r1"
    for sub in ("core", "leaderboard"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "leaderboard" / "board.py").write_text("X = 1\n")
    (package / "core" / "lazy.py").write_text("def f():\n    from agentgym_r1.leaderboard import board\n")
    (package / "core" / "relative.py").write_text("from ..leaderboard.board import X\n")
    assert sorted(forbidden_imports(package)) == [
        "agentgym_r1/core/lazy.py:2: core -> leaderboard (agentgym_r1.leaderboard.board)",
        "agentgym_r1/core/relative.py:1: core -> leaderboard (agentgym_r1.leaderboard.board)",
    ]
