"""``ppexec rank``: which ranks, on which device, what it refuses, and where the traces go."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ppsim.api import Scenario, output_targets, predict, say, stdout_console
from ppsim.errors import PpsimError


def ranks_of(text: str, p: int) -> list[int]:
    """``all`` or one pipeline rank, checked against the plan's ``p`` ranks."""
    if text == "all":
        return list(range(p))
    if not text.isdigit() or int(text) >= p:
        raise PpsimError(f"{text!r} is not a pipeline rank of this plan: give 0 to {p - 1}, or all", field="--rank")
    return [int(text)]


def device_of(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise PpsimError("this machine has no GPU torch can use: run with --device cpu", field="--device")
    return name


def run_ranks(s: Scenario, path: Path, rank: str, steps: int, waits: bool, device: str, out: Path | None,
              json_out: bool, seed: int, force: bool) -> None:
    import torch

    from ppexec.launch.prepare import check_buildable
    from ppexec.rank.check import as_built, check_rank, predicted_rank
    from ppexec.rank.report import print_check, print_heaviest
    from ppexec.runtimes.base import refuse_copies

    check_buildable(s)
    if s.tensor_parallel > 1:
        raise PpsimError("one device runs a tensor-parallel rank's slices only beside its group; ppexec rank runs "
                         "tensor_parallel 1 (ppsim predicts the rest)", field="tensor_parallel")
    if s.expert_parallel > 1:
        raise PpsimError("a rank's experts exchange tokens with the other expert-parallel ranks; ppexec rank runs "
                         "expert_parallel 1", field="expert_parallel")
    s, notes = as_built(s)
    for note in notes:
        say("note", note)
    prediction = predict(s)
    refuse_copies(prediction.plan)
    chosen = ranks_of(rank, prediction.plan.num_ranks)
    targets: dict[str, Path] = {}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        targets = output_targets({f"rank{r}.{side}": out / f"rank{r}.{side}.json" for r in chosen
                                  for side in ("measured", "predicted")}, [path], force)
    where = torch.device(device_of(device))
    console = stdout_console(highlight=False)
    checks = []
    for r in chosen:
        c = check_rank(s, prediction, r, where, steps, waits, seed)
        checks.append(c)
        if targets:
            c.trace.save(targets[f"rank{r}.measured"])
            predicted_rank(prediction, r).save(targets[f"rank{r}.predicted"])
        if not json_out:
            print_check(c, console)
    if json_out:
        heaviest = max(checks, key=lambda c: c.measured_peak_bytes).rank
        sys.stdout.write(json.dumps({"ranks": [c.to_json_dict() for c in checks], "heaviest_measured": heaviest},
                                    indent=2) + "\n")
        return
    if len(checks) > 1:
        print_heaviest(checks, console)
    if out is not None:
        console.print(f"traces in {out}: ppsim compare {out}/rank{chosen[0]}.predicted.json "
                      f"{out}/rank{chosen[0]}.measured.json", highlight=False)
