"""The desktop composes no engine of its own (issue 21): ``engine.runtime`` is the engine's
one front door, and it alone builds the scheduler, the default model's view, the one
request pipeline, the request monitor, the store, the chores and the HTTP server.

Read from the source with :mod:`ast` (no import runs): of the layers the runtime composes
(``engine.server``, ``engine.supervisor``, ``engine.worker`` and ``engine.runtime``'s own
modules) a desktop module imports ``engine.runtime`` itself and, besides, only the types,
errors and plain values listed in :data:`TYPES`; and it never builds one of the runtime's
parts (:data:`BUILT_BY_THE_RUNTIME`), not even from a name it may import as a type.
"""

from __future__ import annotations

import ast
from pathlib import Path

DESKTOP = Path(__file__).resolve().parents[2] / "desktop"

COMPOSER = "engine.runtime"  # the one composition module the desktop may import
LAYERS = ("engine.server", "engine.supervisor", "engine.worker", "engine.runtime")
"""What the runtime composes: from these, only :data:`COMPOSER` and :data:`TYPES`."""

# Module -> the names the desktop may import from it (types, errors, plain values); None:
# the whole module is types and values (states, events).
TYPES: dict[str, frozenset[str] | None] = {
    "engine.server.errors": frozenset({"APIError"}),  # the chat raises and shows it
    "engine.server.monitor": frozenset(
        {"RequestMonitor", "RequestEntry", "API_KEY_VARIABLE", "curl_command"}
    ),  # the Requests window reads the runtime's monitor
    "engine.server.pipeline": frozenset(
        {"Pipeline", "GenerateRequest", "Generation", "Done"}
    ),  # the chat generates through the runtime's pipeline
    # The chat checks images with the server's own decoder and limits (pure functions).
    "engine.server.images": frozenset(
        {"ImageRef", "decode_image", "MAX_IMAGE_BYTES", "MAX_IMAGES_PER_REQUEST"}
    ),
    "engine.server.runner": frozenset({"PortInUseError"}),  # why the server did not start
    "engine.supervisor.states": None,  # engine states, EngineStatus, LoadedModel, errors
    "engine.supervisor.unloads": None,  # UnloadEvent: why a model went away
    "engine.worker.messages": frozenset({"SamplingParams"}),  # the chat's sampling options
}

BUILT_BY_THE_RUNTIME = frozenset(
    {
        "Pipeline",
        "RequestMonitor",
        "ModelStore",
        "Scheduler",
        "EngineClient",
        "DefaultModel",
        "ServedEngine",
        "StartupChores",
        "ServerRunner",
        "create_app",
    }
)
"""Names the desktop must never call (nor call a constructor of, ``ModelStore.from_settings``):
it uses the runtime's instances (``controller.pipeline``, ``.monitor``, ``.store``...)."""


def _imports(tree: ast.AST) -> list[tuple[str, str | None]]:
    """Every ``(module, name)`` a module imports (``name`` None for ``import module``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if node.module == "engine":  # from engine import cpu_tune: a module
                    found.append((f"engine.{alias.name}", None))
                else:
                    found.append((node.module, alias.name))
    return found


def _in_layers(module: str) -> bool:
    return any(module == layer or module.startswith(f"{layer}.") for layer in LAYERS)


def _import_problems(module: str, name: str | None) -> list[str]:
    if module == COMPOSER or not _in_layers(module):
        return []
    allowed = TYPES.get(module, frozenset())
    if name is not None and (allowed is None or name in allowed):
        return []
    what = f"import {module}" if name is None else f"from {module} import {name}"
    return [f"{what}: only {COMPOSER} composes the engine"]


def _built(tree: ast.AST) -> list[str]:
    """Calls of a runtime part's name: ``Pipeline(...)``, ``ModelStore.from_settings(...)``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            func = func.value  # a class method that builds one
        if isinstance(func, ast.Name) and func.id in BUILT_BY_THE_RUNTIME:
            found.append(f"line {node.lineno}: builds {func.id} (the runtime builds it)")
    return found


def problems(source: str) -> list[str]:
    tree = ast.parse(source)
    found = [p for module, name in _imports(tree) for p in _import_problems(module, name)]
    return found + _built(tree)


def _desktop_modules() -> list[Path]:
    return sorted(DESKTOP.rglob("*.py"))


def test_the_check_catches_composition() -> None:
    """The rule itself: what it must refuse, what it must let through."""
    refused = [
        "from engine.server.app import create_app",
        "from engine.server.runner import ServerRunner",
        "from engine.supervisor.scheduler import Scheduler",
        "from engine.supervisor.client import EngineClient",
        "from engine.runtime.runtime import Runtime",
        "import engine.server.app",
        "from engine import supervisor",
        "from engine.server.pipeline import Pipeline\npipeline = Pipeline(engine, store)",
        "from engine.store import ModelStore\nstore = ModelStore.from_settings(settings)",
    ]
    for source in refused:
        assert problems(source), source
    allowed = [
        "from engine.runtime import Runtime, ServedEngine, TuneDisturbed",
        "from engine.server.pipeline import Pipeline\ndef f(p: Pipeline) -> None: ...",
        "from engine.server.runner import PortInUseError",
        "from engine.supervisor.states import READY, EngineStatus",
        "from engine.store import ModelStore, StoreError",
        "from engine import cpu_tune",
    ]
    for source in allowed:
        assert problems(source) == [], source


def test_the_desktop_composes_no_engine_but_through_the_runtime() -> None:
    modules = _desktop_modules()
    assert DESKTOP / "controller.py" in modules and DESKTOP / "views" / "chat_window.py" in modules
    found: dict[str, list[str]] = {}
    engine_imports: set[str] = set()
    for path in modules:
        source = path.read_text(encoding="utf-8")
        engine_imports |= {m for m, _ in _imports(ast.parse(source)) if m.startswith("engine")}
        if issues := problems(source):
            found[str(path.relative_to(DESKTOP.parent))] = issues
    assert found == {}
    assert COMPOSER in engine_imports  # the controller's one front door (not a vacuous pass)
