"""The package layout's promises, checked on the source: data flows one way (no import cycles
but the two printer pairs, where an IR's __repr__ calls its printer), and no module reaches into
another module's private names."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autosched", "search_spaces", "cost_models")
#: an IR node's __str__ prints through the printer, which walks the IR's node classes
ALLOWED_CYCLES = [{"autosched.te.expr", "autosched.te.printer"}, {"autosched.lower.ir", "autosched.lower.printer"}]


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _imports(mods: dict[str, Path]) -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """Module → project modules it imports (anywhere in it, functions included), and every
    (importer, module, name) where the name is private."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    if f"{base}.{alias.name}" in mods:
                        graph[name].add(f"{base}.{alias.name}")
                    elif base in mods:
                        graph[name].add(base)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append((name, base, alias.name))
    return graph, private


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.add(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(component)
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]


def test_no_import_cycles_but_the_printer_pairs():
    graph, _ = _imports(_modules())
    unexpected = [sorted(c) for c in _cycles(graph) if c not in ALLOWED_CYCLES]
    assert not unexpected, f"import cycles: {unexpected}"


def test_no_module_imports_another_modules_private_names():
    _, private = _imports(_modules())
    assert not private, "\n".join(f"{who} imports {name} from {where}" for who, where, name in private)


def test_no_test_module_imports_another():
    """What tests share lives in helper modules; importing a test module would also collect its
    tests twice and tie the two files' fixtures together."""
    offenders = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name} imports {n}" for n in names if n.split(".")[-1].startswith("test_")]
    assert not offenders, offenders
