"""Every Python package of the app is in pyproject's ``packages`` list.

The list is explicit (``[tool.setuptools] packages``), so a new package directory that is not
added to it works in the editable development install and is missing from a built wheel:
``engine/parsing/tool_parsers`` (issue 22's parsers) was, and ``import engine.parsing``
would have failed in a ``pip install``-ed Sidelight.
"""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _listed() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^\[tool\.setuptools\]\s*\npackages = \[(.*?)\]", text, re.S | re.M)
    assert block is not None, "pyproject.toml has no [tool.setuptools] packages list"
    return set(re.findall(r'"([^"]+)"', block.group(1)))


def test_every_package_directory_is_listed() -> None:
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("engine", "desktop", "resources")
        for init in (ROOT / top).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = found - _listed()
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
