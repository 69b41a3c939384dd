"""The layout follows the data flow: each package of ppsim imports only the packages below it
(every import counts, also those inside functions), and ppsim never imports ppexec."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PPSIM = ROOT / "ppsim"
BASE = {"errors", "formats", "outputs", "gc_pause"}  #: what every package may use

#: package -> the ppsim packages it may import (besides its own and BASE)
ALLOWED: dict[str, set[str]] = {
    "inputs": {"plan"},  # the schedule registry: a scenario's default schedule is the registry's
    "plan": set(),
    "costs": {"inputs"},
    "trace": {"plan"},
    "sim": {"plan", "costs", "trace", "inputs"},
    "views": {"trace", "plan", "inputs"},
    "prediction": {"inputs", "costs", "plan", "sim", "trace"},
    "search": {"inputs", "costs", "plan", "sim", "trace", "views", "prediction"},
    "frameworks": {"inputs", "plan", "prediction"},  # a plan as a framework's configuration, and back
    "cli": {"inputs", "costs", "plan", "sim", "trace", "views", "prediction", "search", "frameworks"},
    # what an executor (ppexec) may use of ppsim, on top of everything (tests/ppexec/test_layout_ppexec.py)
    "api": {"inputs", "costs", "plan", "sim", "trace", "views", "prediction", "search", "cli", "frameworks"},
}


def _package(path: Path) -> str:
    rel = path.relative_to(PPSIM)
    return rel.parts[0].removesuffix(".py")


def _ppsim_imports(path: Path) -> set[str]:
    """The top-level ppsim packages a module imports (``ppsim.plan.lower`` -> ``plan``), and ``ppexec``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "ppsim" else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "ppexec":
                out.add("ppexec")
            elif parts[0] == "ppsim" and len(parts) > 1:
                out.add(parts[1])
    return out


MODULES = sorted(p for p in PPSIM.rglob("*.py") if p != PPSIM / "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_what_lies_below_its_package(path: Path) -> None:
    package = _package(path)
    imported = _ppsim_imports(path) - {package}
    assert "ppexec" not in imported, "ppsim never imports ppexec"
    if package in BASE:
        assert imported <= BASE, f"{package} is a base module: it imports {sorted(imported - BASE)}"
        return
    allowed = ALLOWED[package] | BASE
    assert imported <= allowed, f"ppsim.{package} may not import {sorted(imported - allowed)}"


def test_every_package_is_placed_in_the_flow() -> None:
    packages = {_package(p) for p in MODULES}
    assert packages <= set(ALLOWED) | BASE, f"unplaced: {sorted(packages - set(ALLOWED) - BASE)}"


@pytest.mark.parametrize("package", sorted(p.name for p in PPSIM.iterdir() if (p / "__init__.py").is_file()))
def test_every_package_says_what_it_is(package: str) -> None:
    doc = ast.get_docstring(ast.parse((PPSIM / package / "__init__.py").read_text()))
    assert doc and len(doc.split()) >= 8, f"ppsim/{package}/__init__.py needs a docstring saying what it is"


def test_the_checker_sees_imports_inside_functions(tmp_path: Path) -> None:
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from ppsim.prediction import predict\n    import ppexec.run\n")
    assert _ppsim_imports(mod) == {"prediction", "ppexec"}
