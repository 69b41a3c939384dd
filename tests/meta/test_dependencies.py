"""Every third-party module the project imports is declared in pyproject.toml, in the group that is
installed where the importing code runs: ppsim's in the core dependencies (what ``pip install ppsim``
and ``make run`` give), ppexec's in core or ``exec``, the tests' in what ``make test`` installs, the
benchmarks' in ``bench``. Imports inside functions count as much as those at the top of a module:
numpy once reached every ``--html`` page from inside a function, undeclared, and only a fresh venv
showed it. The reverse holds too: a core dependency nothing imports is a cost every user pays.

The slow test at the end installs the project the ordinary way (``pip install <checkout>``, no
extras) into a fresh venv and runs ``ppsim run`` with every output in it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the project runs on 3.10, its tests on 3.11

#: what each folder may import: the groups of pyproject.toml installed wherever its code runs
ALLOWED = {
    "ppsim": ("core",),
    "ppexec": ("core", "exec"),
    "tests": ("core", "exec", "dev", "ray"),  # make test: torch, deepspeed, then .[dev,ray]
    "bench": ("core", "bench"),
}
#: modules of ppsim that may import an extra, with the fix in their error: inside a function, or at the top
#: of a module that ppsim itself imports only inside functions (see :func:`_loaded_lazily`)
EXTRA_IMPORTS = {
    ("ppsim/search/tune/executors.py", "ray"): "ray",
    ("ppsim/sim/simpy_kernel.py", "simpy"): "reference",
    ("ppsim/inputs/cluster.py", "networkx"): "reference",
}
#: core dependencies that ppsim's code uses without importing them, and who does
USED_WITHOUT_IMPORT = {"kaleido": "plotly's write_image (--png) drives it"}
#: calls that import a module named by a string: importlib.import_module("x"), pytest.importorskip("x")
_IMPORTING_CALLS = ("import_module", "importorskip", "find_spec")


def _normal(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(requirement: str) -> tuple[str, list[str]]:
    """(distribution, extras) of a requirement string such as ``ppsim[exec]`` or ``torch==2.13.0``."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", requirement)
    assert m, f"pyproject.toml: cannot read the requirement {requirement!r}"
    return _normal(m.group(1)), [x.strip() for x in (m.group(2) or "").split(",") if x.strip()]


@cache
def groups() -> dict[str, frozenset[str]]:
    """Each group of pyproject.toml ("core" and every extra) as the distributions it installs, a
    self-reference such as ``ppsim[reference]`` expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    raw = {"core": project["dependencies"], **project["optional-dependencies"]}

    def expand(group: str, seen: tuple[str, ...] = ()) -> frozenset[str]:
        out: set[str] = set()
        for req in raw[group]:
            name, extras = _name(req)
            if name == _normal(project["name"]):
                for extra in extras:
                    assert extra in raw and extra not in seen, f"pyproject.toml: {group} names the extra {extra!r}"
                    out |= expand(extra, (*seen, group))
            else:
                out.add(name)
        return frozenset(out)

    return {g: expand(g) for g in raw}


@dataclass(frozen=True)
class Import:
    path: str  #: relative to the root
    line: int
    module: str  #: the top-level module imported
    lazy: bool  #: inside a function


def _walk(node: ast.AST, lazy: bool = False) -> list[tuple[ast.AST, bool]]:
    """Every node under ``node`` with whether it runs inside a function; the body of an
    ``if TYPE_CHECKING:`` is left out (the type checker's imports never run)."""
    if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
        return [x for child in node.orelse for x in _walk(child, lazy)]
    inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    return [(node, lazy), *(x for child in ast.iter_child_nodes(node) for x in _walk(child, inner))]


def _imported(node: ast.AST) -> list[str]:
    """The dotted modules an import statement, or a call that imports a module named by a constant
    string, brings in (``from a.b import c``: a.b and a.b.c, c may be a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        return [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in _IMPORTING_CALLS:
            return [node.args[0].value]
    return []


def _imports(path: Path) -> list[Import]:
    """Every absolute import of a file, by its top-level module: statements anywhere (top level,
    functions, try blocks) and calls that import a module named by a constant string."""
    rel = str(path.relative_to(ROOT))
    out = {}
    for node, lazy in _walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
        for name in _imported(node):
            if name:
                out.setdefault((node.lineno, name.split(".")[0]), lazy)  # type: ignore[attr-defined]
    return [Import(rel, line, module, lazy) for (line, module), lazy in out.items()]


def _loaded_lazily(path: str) -> bool:
    """Every import of the ppsim module at ``path`` by another ppsim module is inside a function."""
    dotted = path.removesuffix(".py").replace("/", ".")
    seen = [lazy for p in (ROOT / "ppsim").rglob("*.py") for node, lazy in _walk(ast.parse(p.read_text(encoding="utf-8")))
            if dotted in _imported(node)]
    return bool(seen) and all(seen)


def _first_party(imp: Import) -> bool:
    """ppsim, ppexec, a module beside the importing file (bench's helpers), or for a test one of the
    helpers in tests/ itself (conftest, doc_commands, browser: pyproject's ``pythonpath`` puts it on the path)."""
    folder = (ROOT / imp.path).parent
    helpers = ROOT / "tests" if imp.path.startswith("tests/") else folder
    return (imp.module in ("ppsim", "ppexec") or (folder / f"{imp.module}.py").is_file() or (folder / imp.module).is_dir()
            or (helpers / f"{imp.module}.py").is_file())


@cache
def _distributions() -> dict[str, list[str]]:
    return {k: [_normal(d) for d in v] for k, v in importlib.metadata.packages_distributions().items()}


def third_party_imports(top: str) -> list[tuple[Import, str]]:
    """(import, the distribution that provides its module) for every third-party import under ``top``."""
    out = []
    for path in sorted((ROOT / top).rglob("*.py")):
        for imp in _imports(path):
            if imp.module in sys.stdlib_module_names or imp.module == "__future__" or _first_party(imp):
                continue
            dists = _distributions().get(imp.module)
            assert dists, (f"{imp.path}:{imp.line} imports {imp.module}, which no installed distribution provides: "
                           f"declare it in pyproject.toml and install it")
            out.append((imp, dists[0]))
    return out


def _declared_in(dist: str) -> list[str]:
    return [g for g, members in groups().items() if dist in members]


@pytest.mark.parametrize("top", sorted(ALLOWED))
def test_every_import_is_declared_where_its_code_runs(top: str) -> None:
    allowed = set().union(*(groups()[g] for g in ALLOWED[top]))
    wrong = []
    for imp, dist in third_party_imports(top):
        extra = EXTRA_IMPORTS.get((imp.path, imp.module))
        if extra is not None:
            if dist not in groups()[extra] or not (imp.lazy or _loaded_lazily(imp.path)):
                wrong.append(f"{imp.path}:{imp.line}: {imp.module} must be in the {extra!r} extra and imported inside "
                             "a function")
        elif dist not in allowed:
            where = _declared_in(dist)
            wrong.append(f"{imp.path}:{imp.line}: {imp.module} ({dist}) is "
                         + (f"declared only in {', '.join(where)}" if where else "not declared")
                         + f"; {top}/ may use {', '.join(ALLOWED[top])}")
    assert not wrong, "\n".join(wrong)


def test_every_core_dependency_is_used_by_ppsim() -> None:
    imported = {dist for _, dist in third_party_imports("ppsim")}
    unused = sorted(groups()["core"] - imported - {_normal(d) for d in USED_WITHOUT_IMPORT})
    assert not unused, f"core dependencies ppsim never imports (move them to an extra): {unused}"
    for dist in USED_WITHOUT_IMPORT:
        assert _normal(dist) in groups()["core"], f"{dist} is listed as used without import but is not core"


def test_extras_are_imported_only_where_listed() -> None:
    """An extra's module in ppsim outside its listed places would fail where the extra is missing."""
    extras = set().union(*(groups()[g] for g in groups() if g != "core")) - groups()["core"]
    stray = [f"{imp.path}:{imp.line}: {imp.module}" for imp, dist in third_party_imports("ppsim")
             if dist in extras and (imp.path, imp.module) not in EXTRA_IMPORTS]
    assert not stray, stray
    for path, module in EXTRA_IMPORTS:
        assert any(i.module == module for i in _imports(ROOT / path)), f"{path} no longer imports {module}: drop it"


def test_the_check_sees_an_undeclared_import_inside_a_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a lazy import of an undeclared package in a ppsim module is caught."""
    fake = tmp_path / "ppsim"
    fake.mkdir()
    (fake / "page.py").write_text("def draw():\n    import numpy as np\n    return np.zeros(1)\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    imports = third_party_imports("ppsim")
    assert [(i.path, i.module, i.lazy, d) for i, d in imports] == [("ppsim/page.py", "numpy", True, "numpy")]
    monkeypatch.setattr(sys.modules[__name__], "groups", lambda: {"core": frozenset({"pyyaml"})})
    with pytest.raises(AssertionError, match="numpy .numpy. is not declared"):
        test_every_import_is_declared_where_its_code_runs("ppsim")


@pytest.mark.slow  # a fresh venv and a download of the core dependencies (about a minute)
def test_a_plain_install_runs_ppsim_with_every_output(tmp_path: Path) -> None:
    """``pip install <checkout>`` (no extras) into a clean venv, from the files git tracks (a fresh
    clone's), then ``ppsim run`` with the timeline page, the Chrome trace and the JSON summary."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    checkout = tmp_path / "checkout"
    for f in files:
        if (ROOT / f).is_file():
            (checkout / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, checkout / f)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, str(checkout)], check=True, timeout=900)
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout
    installed = {_normal(line.split("==")[0]) for line in listed.split()}
    assert not installed & {"torch", "deepspeed", "simpy", "networkx", "pytest"}, "an extra came with the plain install"
    run = subprocess.run([str(venv / "bin" / "ppsim"), "run", "scenarios/gpt.yaml", "--html", str(tmp_path / "t.html"),
                          "--trace", str(tmp_path / "t.json")], cwd=checkout, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "step time" in run.stdout
    assert (tmp_path / "t.html").stat().st_size > 1_000_000  # self-contained: plotly.js inside
    assert '"traceEvents"' in (tmp_path / "t.json").read_text(encoding="utf-8")[:2000]
    version = subprocess.run([str(venv / "bin" / "ppsim"), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("ppsim "), version.stdout + version.stderr
