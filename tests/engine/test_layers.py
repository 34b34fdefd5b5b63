"""The house's import graph: no circle, no import from a lower layer up, one front door.

Layers, lowest first: the engine's core (settings, models, store, parsing, worker, ...) <
``engine.supervisor`` (workers and their placement) < ``engine.server`` (HTTP, over
protocols) < ``engine.runtime`` (composition) < ``engine.cli`` and ``desktop/``. Only the
runtime composes the others: ``engine/cli.py`` and ``desktop/`` build the scheduler, the
pipeline, the app and the server through it alone.

Pure source checks (``ast``), no imports executed: an import inside a function counts, an
import under ``if TYPE_CHECKING:`` counts for the module graph but runs nothing, so it makes
no runtime circle through a package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from engine.models import TASKS
from engine.supervisor.kinds import KINDS

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("engine.supervisor", "engine.server", "engine.runtime", "engine.cli")
# What composes the engine: only engine.runtime may import these for the CLI and desktop/,
# or build these (they may name them as types).
COMPOSITION = (
    "engine.server.app",
    "engine.server.runner.ServerRunner",
    "engine.supervisor.scheduler",
    "engine.supervisor.client",
    "engine.store.relocate.relocate_at_start",
    "engine.cpu_tune.tune_unless_cached",
)
BUILT_BY_THE_RUNTIME = ("Pipeline", "RequestMonitor", "Scheduler", "EngineClient", "DefaultModel")


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*(ROOT / "engine").rglob("*.py"), *(ROOT / "desktop").rglob("*.py")]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str, *, type_only: bool) -> set[tuple[str, str]]:
    """(module, imported name) pairs of ``name``'s imports, the ``TYPE_CHECKING`` ones only
    when ``type_only``; each target as written (``pkg.mod`` or ``pkg.mod.Name``)."""
    path = MODULES[name]
    found: set[tuple[str, str]] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" in ast.unparse(node.test) and not type_only:
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update((alias.name, alias.name) for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            module = node.module or ""
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([module] if module else [])])
            for alias in node.names:
                found.add((module, f"{module}.{alias.name}"))

    Visitor().visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _known(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph(*, runtime: bool) -> dict[str, set[str]]:
    """Module -> modules it imports. ``runtime``: only what executes (no TYPE_CHECKING
    imports), with the packages an import runs on the way (``a.b`` for ``a.b.c``)."""
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        edges: set[str] = set()
        for module, target in _imports(name, type_only=not runtime):
            for item in (module, target):
                known = _known(item)
                if known is None:
                    continue
                edges.add(known)
                if runtime:
                    parts = known.split(".")
                    edges.update(".".join(parts[:k]) for k in range(1, len(parts)))
        graph[name] = {m for m in edges if m in MODULES and not name.startswith(m)}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start, edges in graph.items():
        if start in index:
            continue
        work = [(start, iter(sorted(edges)))]
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
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    item = stack.pop()
                    on_stack.discard(item)
                    component.append(item)
                    if item == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_checks_see_the_house() -> None:
    assert {"engine.runtime.runtime", "engine.supervisor.scheduler", "engine.cli"} <= set(MODULES)
    assert "engine.server.app" in _graph(runtime=True)["engine.runtime.runtime"]


def test_no_import_circle_at_run_time_or_in_types() -> None:
    assert _circles(_graph(runtime=True)) == []
    assert _circles(_graph(runtime=False) | _graph(runtime=True)) == []


def _layer(module: str) -> int:
    for rank, prefix in enumerate(LAYERS, start=1):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return len(LAYERS) + 1 if module.startswith("desktop") else 0


def test_no_layer_imports_one_above_it() -> None:
    upward = []
    for name in MODULES:
        if name.startswith("desktop") or name == "engine.cli":
            continue  # the top: the CLI starts the tray app (desktop/) when asked
        for module, _ in _imports(name, type_only=False) | _imports(name, type_only=True):
            known = _known(module)
            if known is not None and _layer(known) > _layer(name):
                upward.append(f"{name} -> {known}")
    assert upward == []


def test_only_the_runtime_composes_for_the_cli_and_the_desktop() -> None:
    composers = [n for n in MODULES if n == "engine.cli" or n.startswith("desktop")]
    offenders = []
    for name in composers:
        for _, target in _imports(name, type_only=False):
            if any(target == c or target.startswith(c + ".") for c in COMPOSITION):
                offenders.append(f"{name} imports {target}")
        for node in ast.walk(ast.parse(MODULES[name].read_text(encoding="utf-8"))):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            if call and node.func.id in BUILT_BY_THE_RUNTIME:  # type: ignore[attr-defined]
                offenders.append(f"{name} builds {node.func.id}")  # type: ignore[attr-defined]
    assert offenders == []


def test_every_model_task_is_one_row_of_the_kinds_table() -> None:
    """A new kind of model is one row of engine.supervisor.kinds.KINDS: the scheduler reads
    nothing else about a model's task."""
    assert set(KINDS) == set(TASKS)
    source = (ROOT / "engine" / "supervisor" / "scheduler.py").read_text(encoding="utf-8")
    for task in TASKS:
        assert f'"{task}"' not in source, f"the scheduler names the task {task!r}"
