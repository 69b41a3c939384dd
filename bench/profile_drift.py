"""Profiles against the machine's drift: the same raw profiling data assembled with and without
putting each profiling run at one reference speed, and both predictions against the same runs.

``ppexec profile`` fits a block's time inside the engine and each stage position's overhead from
its profiling runs, launched about 15 s apart (four, A B B A, since 2026-12-04; ``--runs 2`` takes
two, as before, and ``analyze``'s "+" ways pool two profiles' runs); this shared machine's speed drifts by up to tens of
per cent over minutes, and drift between the two runs lands in the fit. Each run's ranks also
time a block alone right before their engine steps: ``ppexec.measure.profile.assemble(normalize=...)``
scales each run's spans by the reference block time over that run's own (``run``), each rank's
by its own (``rank``), or leaves them as measured (``none``, the old way).

``measure`` takes K fresh profiles of the accuracy bench's small model (torch runtime, 2 ranks),
each followed by one round of real runs (every schedule x micro-batch count), keeping every
folder; ``analyze`` (run after ``measure`` by default) re-reads them and prints, per profile and
way, the fitted block times and overheads with their spread over the K profiles, and per case the
prediction of every (profile, way) against the run of the round that followed that profile (the
same time window) and against the median of all rounds, and the run-to-run spread of each case.

    .venv/bin/python bench/profile_drift.py measure --out /tmp/drift --profiles 4   # ~12 min
    .venv/bin/python bench/profile_drift.py analyze --out /tmp/drift
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from accuracy import MODELS, SCHEDULES, scenario  # noqa: E402

WAYS = ("none", "run", "rank")
#: and pooled with the next profile's runs (+); "ab": a four-run profile's first two runs alone (A B),
#: against its A B B A ("none"): the same raw data fitted from two runs and from four
ALL_WAYS = WAYS + tuple(w + "+" for w in WAYS) + ("ab",)


def load() -> float:
    return os.getloadavg()[0]


def cases(schedules: list[str], mbs: list[int]) -> list[tuple[str, int]]:
    return [(sched, m) for sched in schedules for m in mbs]


def case_scenario(model: str, sched: str, m: int):
    chunks = SCHEDULES["torch"][sched]
    blocks = MODELS[model]["layers"]
    s = scenario(model, sched, m, "balanced", chunks)
    per = blocks // (2 * chunks)
    return s.with_overrides(partition=[per] * (2 * chunks))  # explicit: the same plan whichever profile


def measure(args: argparse.Namespace) -> None:
    from ppexec.launch.prepare import RunOptions
    from ppexec.measure.profile import measure_profile
    from ppexec.results.collect import execute
    from ppexec.results.prediction_check import predict_as_run

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "log.json"
    log = json.loads(log_path.read_text()) if log_path.exists() else []
    base = scenario(args.model, "1f1b", 4, "balanced")
    start = sum(1 for e in log if e["what"] == "profile")
    for k in range(start, start + args.profiles):
        t0, l0 = time.perf_counter(), load()
        folder = out / f"profile-{k}"
        profile = measure_profile(base, keep=folder, runtime="torch", force=True, runs=args.runs)
        log.append({"what": "profile", "k": k, "folder": folder.name, "load_before": l0, "load_after": load(),
                    "seconds": time.perf_counter() - t0, "at": time.strftime("%H:%M:%S")})
        print(f"profile {k}: {log[-1]['seconds']:.0f} s, load {l0:.2f} -> {load():.2f}", flush=True)
        for sched, m in cases(args.schedules.split(","), [int(x) for x in args.microbatches.split(",")]):
            t0, l0 = time.perf_counter(), load()
            s = case_scenario(args.model, sched, m)
            as_run, runtime, _ = predict_as_run(s, profile, "torch")
            folder = out / f"round-{k}" / f"{sched}-m{m}"
            execute(as_run, RunOptions(out=folder, steps=args.steps, warmup=args.warmup, runtime=runtime, force=True),
                    profile=profile)
            log.append({"what": "run", "round": k, "case": f"{sched}-m{m}", "folder": str(folder.relative_to(out)),
                        "load_before": l0, "load_after": load(), "seconds": time.perf_counter() - t0,
                        "at": time.strftime("%H:%M:%S")})
            print(f"  {sched} m={m}: {log[-1]['seconds']:.0f} s, load {l0:.2f}", flush=True)
        log_path.write_text(json.dumps(log, indent=1))


def profile_runs(folder: Path, layers: int):
    from ppexec.measure.profile import profiling_partitions
    from ppexec.worker.events import RankState, read_events

    runs = []
    kept = 0
    while (folder / f"run-{kept}").is_dir():
        kept += 1
    for k, partition in enumerate(profiling_partitions(layers, runs=kept)):
        states = [RankState(r) for r in range(2)]
        read_events(folder / f"run-{k}", states)
        runs.append((partition, states))
    return runs


def analyze(args: argparse.Namespace) -> None:
    from ppexec.measure.profile import assemble, profiling_scenario, speed_factors
    from ppexec.results.collect import collect
    from ppexec.worker.run_spec import RunSpec
    from ppsim.prediction import scenario_workload
    from ppsim.sim import simulate
    from ppsim.trace.metrics import step_time_ms

    out: Path = args.out
    log = json.loads((out / "log.json").read_text())
    base = profiling_scenario(scenario(args.model, "1f1b", 4, "balanced"))
    entries = [e for e in log if e["what"] == "profile"]
    raw = {e["k"]: profile_runs(out / e["folder"], base.model.layers) for e in entries}
    loads = {e["k"]: e["load_before"] for e in entries}
    ks = sorted(raw)
    profiles: dict[int, dict[str, object]] = {}
    print("profile  load  way     alone F+B per run (ms)  factors         block F      B |  first F      B |   last F      B"
          "  (overheads, ms)")
    for k in ks:
        # pooled ("+"): this profile's two runs and the next one's (the last profile: the one before), four runs in all
        other = k + 1 if k + 1 in raw else k - 1
        pooled = raw[k] + raw[other] if other in raw else None
        profiles[k] = {}
        for way in ALL_WAYS:
            runs = pooled if way.endswith("+") else raw[k][:2] if way == "ab" else raw[k]
            if runs is None or (way == "ab" and len(raw[k]) < 4):
                continue
            normalize = "none" if way == "ab" else way.rstrip("+")
            p = assemble(base, runs, normalize=normalize)
            profiles[k][way] = p
            alone = [statistics.median(st.measurements["layers"]["block"]["forward_ms"]
                                       + st.measurements["layers"]["block"]["backward_ms"] for st in sts)
                     for _, sts in runs]
            f = [statistics.median(x.values()) for x in speed_factors(runs, normalize)]
            o1, o2 = p.overheads["first"], p.overheads["last"]
            print(f"{k:>7} {loads[k]:5.2f}  {way:6} {'/'.join(f'{a:.1f}' for a in alone):>23} "
                  f"{'/'.join(f'{x:.2f}' for x in f):>15} {p.block.forward_ms:7.2f} {p.block.backward_ms:6.2f} |"
                  f" {o1.forward_ms:7.2f} {o1.backward_ms:6.2f} | {o2.forward_ms:7.2f} {o2.backward_ms:6.2f}")
    ways = [w for w in ALL_WAYS if all(w in profiles[k] for k in ks)]
    print("\nspread over the profiles (median [min, max]):")
    for way in ways:
        ps = [profiles[k][way] for k in ks]
        cols = {"block F": [p.block.forward_ms for p in ps], "block B": [p.block.backward_ms for p in ps],
                "first F": [p.overheads["first"].forward_ms for p in ps],
                "first B": [p.overheads["first"].backward_ms for p in ps],
                "last F": [p.overheads["last"].forward_ms for p in ps],
                "last B": [p.overheads["last"].backward_ms for p in ps]}
        print(f"  {way:5} " + "  ".join(f"{k} {statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]"
                                        for k, v in cols.items()))
    runs_by_case: dict[str, dict[int, tuple[float, float]]] = {}
    for e in [e for e in log if e["what"] == "run"]:
        result = collect(out / e["folder"])
        spec = RunSpec.read(out / e["folder"])  # the scenario and the plan as run
        meas = statistics.median(step_time_ms(t) for t in result.traces)
        preds = {(k, way): step_time_ms(simulate(spec.plan, scenario_workload(spec.scenario, profiles[k][way]).costs,
                                                 spec.scenario.pipeline.comm))
                 for k in profiles for way in ways}
        runs_by_case.setdefault(e["case"], {})[e["round"]] = (meas, e["load_before"], preds)  # type: ignore[assignment]
    print("\nper case: measured step per round (ms, load), run-to-run range; then the signed error of each way,")
    print("median over the profiles, against the round after that profile (same window) | against the median of the rounds")
    errs: dict[str, dict[str, list[float]]] = {w: {"window": [], "pooled": []} for w in ways}
    for case, rounds in runs_by_case.items():
        meds = [rounds[r][0] for r in sorted(rounds)]
        pooled = statistics.median(meds)
        rng = (max(meds) - min(meds)) / pooled
        line = f"{case:22} " + " ".join(f"{rounds[r][0]:6.1f}({rounds[r][1]:.1f})" for r in sorted(rounds))
        line += f"  range {100 * rng:4.1f}% |"
        for way in ways:
            window = [rounds[k][2][(k, way)] / rounds[k][0] - 1 for k in sorted(rounds) if k in profiles]
            pool = [rounds[k][2][(k, way)] / pooled - 1 for k in sorted(rounds) if k in profiles]
            errs[way]["window"] += window
            errs[way]["pooled"] += pool
            line += f" {way} {100 * statistics.median(window):+5.1f}/{100 * statistics.median(pool):+5.1f}"
        print(line)
    print("\nall (profile, case) pairs: median signed, median |error|, max |error| — same window | pooled")
    for way in ways:
        w, p = errs[way]["window"], errs[way]["pooled"]
        print(f"  {way:5} {100 * statistics.median(w):+6.2f}% {100 * statistics.median(map(abs, w)):5.2f}% "
              f"{100 * max(map(abs, w)):5.2f}%  | {100 * statistics.median(p):+6.2f}% "
              f"{100 * statistics.median(map(abs, p)):5.2f}% {100 * max(map(abs, p)):5.2f}%")
    print(f"load average now {load():.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("measure", "analyze"))
    ap.add_argument("--out", type=Path, required=True, help="folder for the profiles and runs (kept)")
    ap.add_argument("--profiles", type=int, default=4, help="measure: profiles (and rounds of runs) to take")
    ap.add_argument("--model", default="small", choices=list(MODELS))
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved-1f1b,zb-h1")
    ap.add_argument("--microbatches", default="4,8")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2, help="measure: profiling runs per profile (ppexec profile takes 4)")
    args = ap.parse_args()
    if args.what == "measure":
        measure(args)
    analyze(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
