"""``ppsim tune --write PATH`` and ``--write-top N DIR``: where the tuned plans go (checked before the
search: never over a file the user wrote, unless ``--force``) and writing them as scenario files."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ppsim.errors import PpsimError

if TYPE_CHECKING:  # pragma: no cover
    from ppsim.frameworks import Export
    from ppsim.inputs.scenario import Scenario
    from ppsim.search.tune.report import TuneResult


def plan_files(write: Path | None, write_top: tuple[int, Path] | None, scenario: Path,
               force: bool) -> list[tuple[Path, int]]:
    """(file, rank of the plan it gets): ``write`` the best, DIR/STEM-tuned-K.yaml the K-th for K = 1..N;
    each checked now, so a refusal costs no search."""
    from ppsim import outputs

    files: list[tuple[str, Path, int]] = []
    if write is not None:
        files.append(("--write", write, 1))
    if write_top is not None:
        n, folder = write_top
        if n < 1:
            from ppsim.cli.common import usage_error

            raise usage_error(f"the count N must be at least 1, got {n}", "--write-top")
        if folder.exists() and not folder.is_dir():
            raise PpsimError(f"{folder} is a file; give a folder (it is created if missing)",
                             field="--write-top")
        if not folder.exists():
            if not folder.parent.is_dir():
                raise PpsimError(f"folder {folder.parent} does not exist; create it first",
                                 field="--write-top")
            folder.mkdir()
        files += [("--write-top", folder / f"{scenario.stem}-tuned-{k}.yaml", k) for k in range(1, n + 1)]
    checked = [(outputs.check_output(p, opt, [scenario], force), k) for opt, p, k in files]
    if len({p.resolve() for p, _ in checked}) < len(checked):
        raise PpsimError("--write and --write-top name the same file; give each its own name", field="--write")
    return checked


def write_plans(result: TuneResult, source: Scenario, files: list[tuple[Path, int]], command: str) -> list[str]:
    """Write the K-th ranked plan to each (file, K); the lines to report."""
    from ppsim import outputs
    from ppsim.search.tune.scenario_file import scenario_text

    ranked, counts = result.ranked, result.counts()
    lines = []
    for path, k in files:
        if k > len(ranked):
            why = (f"only {counts.fit:,} plans fit" if counts.fit < k
                   else f"only {len(ranked):,} plans simulated, of {counts.fit:,} that fit")
            lines.append(f"not written: {path} (plan {k}: {why})")
            continue
        outputs.write_text(path, scenario_text(source, ranked[k - 1], k, counts, command, path))
        lines.append(f"wrote {path} (plan {k}: {ranked[k - 1].candidate.label()}); on any machine: ppsim run "
                     f"{shlex.quote(str(path))}; for ppexec on the cluster, see its header")
    return lines


def best_for(result: TuneResult, source: Scenario, framework: str, stem: str, command: str, folder: Path
             ) -> tuple[int, Export | None, list[str]]:
    """The rank of the best plan ``framework`` can run as predicted, its export, and a line saying why
    the better ones cannot (rank 0 and None when no ranked plan can)."""
    from ppsim.frameworks import CannotExport, export
    from ppsim.inputs.scenario import parse_scenario
    from ppsim.search.tune.space import apply

    base = source.model_dump(exclude_none=True)
    first_refusal = None
    for k, ev in enumerate(result.ranked, 1):
        try:
            exported = export(parse_scenario(apply(base, ev.candidate), source="the plan"), framework, stem, command,
                              folder)
        except CannotExport as exc:
            first_refusal = first_refusal or f"plan 1 ({result.ranked[0].candidate.label()}): {exc.reasons[0]}"
            continue
        lines = [] if k == 1 else [f"plans 1-{k - 1} cannot run on {framework} as predicted; {first_refusal}"]
        return k, exported, lines
    return 0, None, [f"none of the {len(result.ranked)} ranked plans can run on {framework} as predicted; "
                     f"{first_refusal}"]
