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


def test_the_licence_is_an_spdx_string_for_a_setuptools_that_takes_it() -> None:
    """Issue 28, defect 12: the first ``dev.py run`` printed pages of setuptools deprecation
    warnings, repeated on every install: setuptools >= 77 warns about a ``license`` table
    (``{ text = ... }``) and ``License ::`` classifiers, once per build step. An SPDX string
    under ``setuptools>=77`` (the first that reads one) says it once and for all."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = data["project"]
    assert project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in project.get("classifiers", []))
    assert "setuptools>=77" in data["build-system"]["requires"]
