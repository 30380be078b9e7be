"""The library's modules, and the app's, import each other without a cycle, imports inside functions
and under `TYPE_CHECKING` included (a function-level import only hides a cycle until the function
runs; a typing-only one still ties two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LAYER = "unit"  # tests/conftest.py

PACKAGE = Path(__file__).resolve().parents[1] / "libraspec"
APP = PACKAGE.parent / "ui"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that `path` imports anywhere in its body."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in modules and c != name}
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported(p, modules) for p in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, colouring nodes)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_report_imports_report_md_and_not_the_reverse():
    graph = import_graph()
    assert "libraspec.experiments.report_md" in graph["libraspec.experiments.report"]
    assert "libraspec.experiments.report" not in graph["libraspec.experiments.report_md"]


@pytest.mark.parametrize("package", [PACKAGE, APP], ids=["libraspec", "ui"])
def test_no_import_cycle(package):
    cycle = find_cycle(import_graph(package))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# The library's layers, lowest first: a module imports only from its own layer and those below.
# Top-level modules are placed one by one (the core spans two layers: the round's parts, then
# the engine and the profiler that run models and drafters); a package's modules share its layer.
LAYERS = (
    ("libraspec.files", "libraspec.device", "libraspec.paths", "libraspec.checks"),
    ("libraspec.models",),
    (
        "libraspec.spec",
        "libraspec.verify",
        "libraspec.cost",
        "libraspec.records",
        "libraspec.policy",
        "libraspec.priced",  # LibraSpec with alpha from the price list (cost, policy, records)
        "libraspec.serving",  # the serving engines' length rules, policies beside policy.py
        "libraspec.group",  # group decisions of a lock-step group, and its forward's prices
        "libraspec.tree",
        "libraspec.tree_policy",  # the policies that choose a round's tree
        "libraspec.oracle",
        "libraspec.modes",
    ),
    ("libraspec.drafters",),
    ("libraspec.engine", "libraspec.profiling"),
    ("libraspec.analysis",),
    ("libraspec.views",),
    ("libraspec.experiments",),
    ("libraspec.train",),
    ("libraspec", "libraspec.__main__"),  # the package's __init__ and its command line
)


def layer_of(module: str) -> int:
    """The layer of `module`: that of the longest name in LAYERS it is or lies under."""
    best = None
    for index, names in enumerate(LAYERS):
        for name in names:
            under = module.startswith(name + ".") and name != "libraspec"  # the package's __init__ is its own
            if (module == name or under) and (best is None or len(name) > len(best[1])):
                best = (index, name)
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/test_imports.py LAYERS: place it")
    return best[0]


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, bs in graph.items() for b in bs if layer_of(b) > layer_of(a))


def test_the_layer_check_sees_an_upward_import():
    assert upward({"libraspec.drafters.hybrid": {"libraspec.analysis.theory"}, "libraspec.analysis.theory": set()}) == [
        "libraspec.drafters.hybrid -> libraspec.analysis.theory"
    ]
    assert upward({"libraspec.engine": {"libraspec.drafters.base"}, "libraspec.drafters.base": set()}) == []
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("libraspec.newthing")


def test_imports_point_down_the_layers():
    """Every module of the library sits in a layer and imports nothing above it, so packages
    never import each other both ways (a package-level cycle like drafters -> train ->
    experiments -> drafters cannot come back)."""
    graph = import_graph()
    for module in graph:
        layer_of(module)
    assert upward(graph) == []


def top_level_imports(path: Path) -> set[str]:
    """The first name of every absolute import in `path`, imports inside functions included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_library_never_imports_the_app_or_gradio_and_the_app_sits_above_it():
    """libraspec/ imports neither gradio nor ui/ nor app.py; ui/ imports app.py nowhere; so the app
    is a view of the library, never the other way round."""
    root = PACKAGE.parent
    for path in sorted(PACKAGE.rglob("*.py")):
        wrong = top_level_imports(path) & {"gradio", "ui", "app"}
        assert not wrong, f"{path.relative_to(root)} imports {sorted(wrong)}"
    for path in sorted((root / "ui").rglob("*.py")):
        assert "app" not in top_level_imports(path), f"{path.relative_to(root)} imports app.py"
    assert {"gradio", "ui"} <= top_level_imports(root / "app.py")  # the finder sees imports


def test_the_app_check_sees_a_planted_import(tmp_path):
    planted = tmp_path / "bad.py"
    planted.write_text("def f():\n    import gradio as gr\n    from ui.render import title\n", encoding="utf-8")
    assert top_level_imports(planted) == {"gradio", "ui"}
