"""ppexec's layout follows a run (launch -> worker -> runtimes -> measure -> results, cli on top):
each part imports only the parts the table below allows (every import counts, also those inside
functions), the worker side never imports the launcher side, and ppexec uses ppsim only through
its public surface for executors, ``ppsim.api`` (and ``ppsim.errors``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PPEXEC = ROOT / "ppexec"

#: part of ppexec -> the parts it may import besides its own (dotted, under ppexec; a part covers
#: what lies below it: "worker" is every module of ppexec/worker/)
ALLOWED: dict[str, set[str]] = {
    # the worker side: what runs inside a rank
    "worker": {"runtimes", "measure.stats", "measure.microbench"},  # the step loop drives a runtime and the benchmarks
    "runtimes": {"worker.clock", "worker.run_spec"},  # the clock every action is timed on, the run a rank reads
    "measure.stats": set(),  # pure statistics
    "measure.microbench": {"runtimes.model", "runtimes.tensor_parallel", "measure.stats"},
    # the launcher side
    "launch": {"worker", "runtimes.base"},  # writes run.json, reads the events; chooses a runtime
    "measure.profile": {"launch", "worker", "measure.stats"},  # launches the profiling runs, assembles them
    "measure.device_curves": set(),  # no torch: the shapes to time and the curves
    "measure.device_bench": {"runtimes.model", "measure.device_curves"},
    "measure": set(),  # measure/__init__.py
    "results": {"launch", "worker", "runtimes", "measure"},  # the end of the flow: runs, collects, compares
    "rank": {"runtimes", "launch"},  # one rank run alone in this process: a runtime's model, the launcher's checks
    "cli": {"launch", "worker", "runtimes", "measure", "results", "rank"},
}
#: what runs inside a rank, and what starts and watches ranks: the first never imports the second
WORKER_SIDE = ("worker", "runtimes", "measure.stats", "measure.microbench")
LAUNCHER_SIDE = ("launch", "results", "measure.profile", "rank", "cli")
#: the only ppsim modules ppexec imports
PPSIM_SURFACE = {"ppsim.api", "ppsim.errors"}


def _within(name: str, part: str) -> bool:
    return name == part or name.startswith(part + ".")


def _part(path: Path) -> str:
    """The part of ppexec a module belongs to: the longest entry of ALLOWED its dotted name lies within."""
    name = ".".join(path.relative_to(PPEXEC).with_suffix("").parts).removesuffix(".__init__")
    parts = [p for p in ALLOWED if _within(name, p)]
    assert parts, f"ppexec/{path.relative_to(PPEXEC)} lies in no part of ALLOWED: place it in the flow"
    return max(parts, key=len)


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(ppexec modules, ppsim modules) a module imports, dotted (``from ppexec.measure import stats``
    counts as ``measure.stats``; ppexec's names are relative to ppexec)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in {"ppexec", "ppsim"} | _PACKAGES:
                names += [f"{node.module}.{a.name}" for a in node.names]  # may name a submodule
            else:
                names.append(node.module)
    ppexec = {n.removeprefix("ppexec.") for n in names if n.startswith("ppexec.")}
    ppsim = {n for n in names if n == "ppsim" or n.startswith("ppsim.")}
    return ppexec, ppsim


#: ppexec's packages, dotted (a ``from PACKAGE import NAME`` may import a module)
_PACKAGES = {"ppexec." + ".".join(p.parent.relative_to(PPEXEC).parts) for p in PPEXEC.rglob("__init__.py")} - {"ppexec."}
MODULES = sorted(PPEXEC.rglob("*.py"))
PACKAGES = sorted(p.parent for p in PPEXEC.rglob("__init__.py"))


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


@pytest.mark.parametrize("path", [m for m in MODULES if m != PPEXEC / "__init__.py"], ids=_id)
def test_a_module_imports_only_what_its_part_may(path: Path) -> None:
    part = _part(path)
    imported, _ = _imports(path)
    allowed = ALLOWED[part] | {part}
    wrong = sorted(n for n in imported if not any(_within(n, a) for a in allowed))
    assert not wrong, f"ppexec.{part} may not import {['ppexec.' + n for n in wrong]} (allowed: {sorted(ALLOWED[part])})"


@pytest.mark.parametrize("path", [m for m in MODULES if m != PPEXEC / "__init__.py"
                                  and any(_within(_part(m), side) for side in WORKER_SIDE)], ids=_id)
def test_the_worker_side_never_imports_the_launcher_side(path: Path) -> None:
    imported, _ = _imports(path)
    launcher = sorted(n for n in imported if any(_within(n, side) for side in LAUNCHER_SIDE))
    assert not launcher, f"{_id(path)} runs inside a rank and imports the launcher side: {launcher}"


def test_the_table_keeps_the_sides_apart() -> None:
    for part in WORKER_SIDE:
        for allowed in ALLOWED[part]:
            assert not any(_within(allowed, side) or _within(side, allowed) for side in LAUNCHER_SIDE), (part, allowed)


def test_importing_the_worker_loads_nothing_of_the_launcher() -> None:
    """What a rank imports, followed through every import: no launcher module comes along."""
    code = ("import sys, ppexec.worker.rank, ppexec.runtimes.base, ppexec.runtimes.deepspeed_pipe, "
            "ppexec.runtimes.torch_pipelining, ppexec.measure.stats; "
            f"print(sorted(m for m in sys.modules if m.startswith({tuple('ppexec.' + s for s in LAUNCHER_SIDE)!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", MODULES, ids=_id)
def test_ppexec_uses_only_ppsims_surface_for_executors(path: Path) -> None:
    _, imported = _imports(path)
    outside = sorted(imported - PPSIM_SURFACE)
    assert not outside, (f"{_id(path)} imports {outside}: ppexec uses ppsim through ppsim.api (add what it needs "
                         "there) and ppsim.errors only")


@pytest.mark.parametrize("package", PACKAGES, ids=_id)
def test_every_package_says_what_it_is_and_what_it_may_import(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 12, f"{_id(package)}/__init__.py needs a docstring: what it is, what it may import"
    if package.parent == PPEXEC and package.name in ALLOWED:
        assert "import" in doc, f"{_id(package)}/__init__.py should say what it may import"


def test_the_checker_sees_every_form_of_import(tmp_path: Path) -> None:
    mod = tmp_path / "m.py"
    mod.write_text("import ppsim.plan\ndef f():\n    from ppexec.measure import stats\n"
                   "    from ppexec.launch.watch import watch\n    from ppsim import outputs\n    from ppsim.api import Plan\n")
    assert _imports(mod) == ({"measure.stats", "launch.watch"}, {"ppsim.plan", "ppsim.outputs", "ppsim.api"})


# ----- ppsim.api: the surface itself ------------------------------------------------------------------
API = ROOT / "ppsim" / "api.py"


def _typed_imports() -> dict[str, str]:
    """name -> "module:name there" of the imports ppsim/api.py gives the type checker."""
    tree = ast.parse(API.read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    out = {}
    for node in ast.walk(block):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}:{a.name}"
    return out


def test_the_api_declares_each_name_once_for_the_type_checker_and_the_loader() -> None:
    import ppsim.api as api

    loader = {name: src if ":" in src else f"{src}:{name}" for name, src in api._SOURCES.items()}
    assert loader == _typed_imports()
    assert sorted(api.__all__) == sorted(loader) and len(set(api.__all__)) == len(api.__all__)


def test_every_api_name_is_ppsims_own_object() -> None:
    import importlib

    import ppsim.api as api

    for name, source in _typed_imports().items():
        module, there = source.split(":")
        assert getattr(api, name) is getattr(importlib.import_module(module), there), name
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        api.nothing  # noqa: B018


def test_the_api_loads_lazily_and_ppexecs_command_starts_light() -> None:
    """``import ppsim.api`` loads no other ppsim module; a name loads its own; ``ppexec --help`` and
    ``--version`` import neither torch nor DeepSpeed."""
    code = ("import sys, ppsim.api; first = sorted(m for m in sys.modules if m.startswith('ppsim.')); "
            "from ppsim.api import Plan; plan = 'ppsim.sim' in sys.modules or 'ppsim.views' in sys.modules; "
            "import ppexec.cli; print(first, plan, [m for m in ('torch', 'deepspeed') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "['ppsim.api'] False []"
