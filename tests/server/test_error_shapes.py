"""Error shapes per API: the registry's matching rules, the shape each path answers in, and
the layering that keeps the server's shared modules (``errors.py`` first) free of dialects.

Each dialect declares its :class:`ErrorShape` next to its routes; only ``app.py``, which
wires the dialects together, may import them. The shapes on the wire through real
middleware and handlers are checked in ``test_security.py``, ``test_anthropic_routes.py``
and ``test_lmstudio_v1_routes.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import engine.server
from engine.server.anthropic.routes import ANTHROPIC_ERRORS
from engine.server.errors import ErrorShape, ErrorShapes, error_body, error_shapes
from engine.server.lmstudio_v1.routes import LMSTUDIO_V1_ERRORS
from engine.server.ollama.routes import OLLAMA_ERRORS

DIALECTS = frozenset({"anthropic", "openai", "ollama", "responses", "lmstudio_v1", "rerank"})
SERVER = Path(engine.server.__file__).parent
COMPOSITION_ROOT = SERVER / "app.py"  # wires every dialect into the app


def _imported_modules(source: str, package: str) -> set[str]:
    """Every module ``source`` (a module of ``package``) imports, anywhere in it, relative
    imports resolved; ``from a import b`` counts as ``a`` and ``a.b`` (b may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _package_of(path: Path) -> str:
    parts = path.relative_to(SERVER.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1])


def _dialect_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["engine", "server"] and len(parts) > 2 and parts[2] in DIALECTS:
        return parts[2]
    return None


def _shared_modules() -> list[Path]:
    """The server's modules outside every dialect package, but for the composition root."""
    return sorted(
        path
        for path in SERVER.rglob("*.py")
        if path.relative_to(SERVER).parts[0] not in DIALECTS and path != COMPOSITION_ROOT
    )


def test_the_dialect_packages_exist() -> None:
    # A renamed package would make the layering test below pass vacuously.
    assert {path.name for path in SERVER.iterdir() if (path / "__init__.py").is_file()} >= DIALECTS


def test_shared_server_modules_import_no_dialect() -> None:
    shared = _shared_modules()
    assert SERVER / "errors.py" in shared
    offenders = {}
    for path in shared:
        modules = _imported_modules(path.read_text(encoding="utf-8"), _package_of(path))
        dialects = sorted(module for module in modules if _dialect_of(module))
        if dialects:
            offenders[str(path.relative_to(SERVER))] = dialects
    assert offenders == {}


def test_the_layering_check_sees_every_spelling_of_an_import() -> None:
    source = """
import engine.server.openai.protocol
from engine.server import anthropic
from engine.server.rerank.routes import rerank_routes
from ..ollama import routes
from .. import responses
def later() -> None:
    from engine.server.lmstudio_v1 import protocol
"""
    modules = _imported_modules(source, "engine.server.monitor")
    dialects = {_dialect_of(module) for module in modules} - {None}
    assert dialects == DIALECTS
    assert _dialect_of("engine.server.errors") is None
    assert _dialect_of("engine.server.openai_like") is None
    assert _package_of(SERVER / "errors.py") == "engine.server"
    assert _package_of(SERVER / "monitor" / "__init__.py") == "engine.server.monitor"


# ---- the registry ------------------------------------------------------------------------


def _tagged(name: str) -> Any:
    def render(status: int, message: str, *, param: str | None, code: str | None) -> Any:
        return {"shape": name, "status": status, "message": message, "param": param, "code": code}

    return render


def _shape_of(shapes: ErrorShapes, path: str, *, refusal: bool = False) -> Any:
    body = shapes.renderer(path, refusal=refusal)(418, "m", param=None, code=None)
    return body.get("shape", "openai")


def test_the_most_specific_pattern_wins_and_openai_is_the_default() -> None:
    shapes = ErrorShapes(
        [
            ErrorShape(("/a", "/a/*"), _tagged("a")),
            ErrorShape(("/a/b/*",), _tagged("ab")),
            ErrorShape(("/a/b/c",), _tagged("abc")),
        ]
    )
    assert _shape_of(shapes, "/a") == "a"
    assert _shape_of(shapes, "/a/x") == "a"
    assert _shape_of(shapes, "/a/b") == "a"  # /a/b/* covers what is below /a/b/, not /a/b
    assert _shape_of(shapes, "/a/b/x") == "ab"
    assert _shape_of(shapes, "/a/b/c") == "abc"
    assert _shape_of(shapes, "/a/b/c/d") == "ab"
    assert _shape_of(shapes, "/ab") == "openai"
    assert _shape_of(shapes, "/") == "openai"
    assert _shape_of(ErrorShapes(), "/a") == "openai"


def test_refusal_only_shapes_leave_the_handlers_errors_to_the_others() -> None:
    shapes = ErrorShapes(
        [
            ErrorShape(("/api/*",), _tagged("plain"), covers="refusals"),
            ErrorShape(("/api/v1/*",), _tagged("v1")),
        ]
    )
    assert _shape_of(shapes, "/api/x", refusal=True) == "plain"
    assert _shape_of(shapes, "/api/x") == "openai"
    assert _shape_of(shapes, "/api/v1/x", refusal=True) == "v1"
    assert _shape_of(shapes, "/api/v1/x") == "v1"


def test_patterns_are_checked() -> None:
    with pytest.raises(ValueError, match="two error shapes"):
        ErrorShapes([ErrorShape(("/a",), _tagged("1")), ErrorShape(("/a",), _tagged("2"))])
    for bad in ("a", "/a*", "/*/b", "/a/*/*"):
        with pytest.raises(ValueError, match="exact path or a prefix"):
            ErrorShape((bad,), _tagged("x"))


def test_an_app_without_a_registry_answers_in_openais_shape() -> None:
    bare = SimpleNamespace(state=SimpleNamespace())  # a Starlette app nobody gave one
    for app in (None, object(), bare):
        assert _shape_of(error_shapes(app), "/v1/messages") == "openai"


# ---- the app's shapes, path by path ------------------------------------------------------

APP_SHAPES = ErrorShapes([ANTHROPIC_ERRORS, LMSTUDIO_V1_ERRORS, OLLAMA_ERRORS])
OPENAI_404 = error_body(404, "gone", code="c")
ANTHROPIC_404 = {"type": "error", "error": {"type": "not_found_error", "message": "gone"}}
LMSTUDIO_404 = {"error": {"type": "invalid_request", "message": "gone", "code": "c"}}
PLAIN_404 = {"error": "gone"}


@pytest.mark.parametrize(
    ("path", "handled", "refused"),
    [
        ("/v1/chat/completions", OPENAI_404, OPENAI_404),
        ("/v1/messages", ANTHROPIC_404, ANTHROPIC_404),
        ("/v1/messages/count_tokens", ANTHROPIC_404, ANTHROPIC_404),
        ("/v1/messagesx", OPENAI_404, OPENAI_404),
        ("/api/v1/chat", LMSTUDIO_404, LMSTUDIO_404),
        ("/api/v1", OPENAI_404, PLAIN_404),
        ("/api/v0/models", OPENAI_404, PLAIN_404),
        ("/api/chat", OPENAI_404, PLAIN_404),
        ("/api/sidelight/requests", OPENAI_404, PLAIN_404),
        ("/api", OPENAI_404, PLAIN_404),
        ("/", OPENAI_404, PLAIN_404),
        ("/apix", OPENAI_404, OPENAI_404),
        ("/health", OPENAI_404, OPENAI_404),
    ],
)
def test_each_path_answers_in_its_apis_shape(path: str, handled: Any, refused: Any) -> None:
    for refusal, expected in ((False, handled), (True, refused)):
        render = APP_SHAPES.renderer(path, refusal=refusal)
        assert render(404, "gone", param=None, code="c") == expected, (path, refusal)
