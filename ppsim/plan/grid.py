"""The step x rank grid of a plan as text: what `ppsim plan` prints and what every PlanError shows,
cropped around the failing spot and marked ``>>X<<``."""

from __future__ import annotations

from collections.abc import Sequence

from ppsim.plan.action import Action
from ppsim.plan.deps import number_steps
from ppsim.plan.plan import Plan


def render_grid(
    actions: Sequence[Sequence[Action]],
    marks: dict[int, int] | None = None,
    *,
    window: int = 6,
    max_ranks: int = 12,
) -> str:
    """The step x rank grid of action texts; ``marks`` maps rank -> index to highlight as ``>>X<<``.

    Large plans are cropped to the rows around the marks and to the marked ranks' neighbourhood.
    """
    marks = marks or {}
    n_rows = max((len(r) for r in actions), default=0)
    if marks:
        lo = max(0, min(marks.values()) - window)
        hi = min(n_rows, max(marks.values()) + window + 1)
    else:
        lo, hi = 0, min(n_rows, 2 * window + 1)
    ranks = list(range(len(actions)))
    if len(ranks) > max_ranks:
        centre = min(marks) if marks else 0
        start = max(0, min(centre - max_ranks // 2, len(ranks) - max_ranks))
        ranks = ranks[start : start + max_ranks]

    def cell(r: int, i: int) -> str:
        if i >= len(actions[r]):
            return ""
        text = str(actions[r][i])
        return f">>{text}<<" if marks.get(r) == i else text

    rows = [[f"rank {r}" for r in ranks]] + [[cell(r, i) for r in ranks] for i in range(lo, hi)]
    labels = ["step"] + [str(i) for i in range(lo, hi)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(ranks))]
    lw = max(len(x) for x in labels)
    lines = []
    if lo > 0:
        lines.append(f"{'':>{lw}}  ... {lo} earlier steps")
    for label, row in zip(labels, rows):
        lines.append(f"{label:>{lw}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths)).rstrip())
    if hi < n_rows:
        lines.append(f"{'':>{lw}}  ... {n_rows - hi} later steps")
    return "\n".join(lines)


def aligned_grid(plan: Plan) -> str:
    """The whole plan as a grid; a compute-only plan is laid out on its unit steps, so the fill and
    drain of the pipeline show as empty cells."""
    if plan.lowered:
        rows = max((len(r) for r in plan.actions), default=0)
        return render_grid(plan.actions, window=rows, max_ranks=plan.num_ranks)
    steps = number_steps(plan)
    n = 1 + max((max(s) for s in steps if s), default=-1)
    cells = [[""] * n for _ in plan.actions]
    for r, ra in enumerate(plan.actions):
        for i, a in enumerate(ra):
            cells[r][steps[r][i]] = str(a)
    widths = [max([len(f"rank {r}")] + [len(c) for c in cells[r]]) for r in range(len(cells))]
    lw = max(4, len(str(n - 1)))
    lines = [f"{'step':>{lw}}  " + "  ".join(f"{'rank ' + str(r):<{w}}" for r, w in enumerate(widths)).rstrip()]
    for t in range(n):
        lines.append(f"{t:>{lw}}  " + "  ".join(f"{cells[r][t]:<{w}}" for r, w in enumerate(widths)).rstrip())
    return "\n".join(lines)
