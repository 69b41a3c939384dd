"""How close ppsim's prediction comes to what the runtimes really do, over a matrix of plans.

For each runtime (DeepSpeed's PipelineEngine, torch.distributed.pipelining) and model it measures
one profile (``ppexec profile --runtime``: layer times, that runtime's overheads, the link) and then,
for every case of the matrix — schedule x micro-batches x partition — predicts the step with that
profile (``ppsim run --profile``, with the runtime's send semantics), runs the same plan for real
with ppexec (2 ranks, gloo, one core each) and compares the prediction with the run's median step
(``ppsim compare``). DeepSpeed runs gpipe and 1f1b; torch every schedule (interleaved and V
ones on 2 chunks; by default the matrix takes gpipe, 1f1b, interleaved-1f1b and zb-h1,
``--schedules`` any others). Printed per case: predicted and measured step time, the signed step-time error
(relative to measured), the largest per-stage bubble error in percentage points (per stage, the
median over the recorded steps) and the run's own step-to-step spread (half the inter-quartile
range over the median). Then the median and maximum |step-time error| and the maximum bubble
error, against the targets (median <= 5 %, maximum <= 10 %, bubble within 3 pp).

Noise. This shared machine's speed wanders, by up to tens of percent over minutes, and a profile is
measured once per model. The first case of each model is therefore run again at the end
(``--repeats``): how far apart the same measurement lands is the floor no prediction can beat.

A mixture of experts (``--models moe --runtimes torch``) runs every case on 2 stages (expert
parallelism 1) and, per micro-batch count, 1F1B on one stage over 2 replicas with expert
parallelism 2: the experts split between them, dispatch and combine as gloo all-to-alls; its rows
add the all-to-alls' measured time on rank 0, the run's routing skew and the error of the
prediction again at that skew (the routing of an untrained router is the run's own, not the plan's).

Only 2 ranks: this machine has 2 cores, and with more ranks than cores the timing says more about
the OS scheduler than about the plan.

    .venv/bin/python bench/accuracy.py                          # the whole matrix (~50 min)
    .venv/bin/python bench/accuracy.py --runtimes torch --models small   # the torch runtime's schedules
    .venv/bin/python bench/accuracy.py --models tiny --microbatches 4 --schedules 1f1b --steps 4
    .venv/bin/python bench/accuracy.py --json results.json      # also write every figure as JSON
    .venv/bin/python bench/accuracy.py --runtimes torch --models moe --schedules 1f1b,zb-h1   # a mixture of experts
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppsim.inputs.scenario import Scenario, parse_scenario  # noqa: E402

#: the models (4 blocks, fp32, 4 sequences per micro-batch); the default matrix uses small and
#: medium: tiny's steps of a few ms are mostly Python overhead and the noise of this machine
MODELS = {
    "tiny": {"layers": 4, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256, "dtype": "fp32"},
    "small": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 64, "vocab": 1024, "dtype": "fp32"},
    "medium": {"layers": 4, "hidden": 384, "heads": 6, "seq_len": 64, "vocab": 2048, "dtype": "fp32"},
    # a mixture of experts: 4 experts, 2 a token, every block a MoE block (ppexec's torch runtime)
    "moe": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 64, "vocab": 1024, "dtype": "fp32",
            "moe": {"experts": 4, "top_k": 2, "ffn_hidden": 512}},
}
#: a deliberately uneven partition: one block on the first stage, three (and the head) on the last
UNEVEN = [1, 3]
TARGET_MEDIAN, TARGET_MAX, TARGET_BUBBLE_PP = 0.05, 0.10, 3.0
def _torch_schedules() -> dict[str, int]:
    from ppsim.plan.schedules import NAMES, describe

    return {name: describe(name).chunks.default for name in NAMES if describe(name).training}


#: what each runtime runs of the matrix (chunks per rank of each schedule): DeepSpeed its two,
#: torch every schedule that trains (interleaved ones on 2 chunks)
SCHEDULES = {"deepspeed": {"gpipe": 1, "1f1b": 1}, "torch": _torch_schedules()}


@dataclass
class Case:
    runtime: str
    model: str
    schedule: str
    microbatches: int
    partition: str
    blocks: list[int]
    predicted_ms: float
    measured_ms: float
    step_time_error: float
    max_bubble_error_pp: float
    spread: float  #: half the IQR of the run's step times over their median
    seconds: float
    expert_parallel: int = 1
    alltoall_ms: float | None = None  #: measured: the step's all-to-alls on rank 0 (expert parallelism)
    routing_skew: float | None = None  #: measured: the busiest expert-parallel rank's token copies over the mean
    #: the step-time error of the prediction again at the run's routing skew (ppexec validate's)
    routed_error: float | None = None


def scenario(model: str, schedule: str, m: int, partition: str, chunks: int = 1, expert_parallel: int = 1
             ) -> Scenario:
    """A case (its send semantics are set by the runtime that runs it): 2 stages; with expert
    parallelism 2, one stage over 2 replicas holding half the experts each (2 ranks either way)."""
    ep = expert_parallel
    return parse_scenario({
        "name": f"accuracy-{model}" + (f"-ep{ep}" if ep > 1 else ""),
        "model": MODELS[model],
        "training": {"micro_batch": 4},
        "pipeline": {"stages": 2 // ep, "microbatches": m, "schedule": schedule, "chunks": chunks,
                     "partition": UNEVEN if partition == "uneven" else "balanced"},
        "data_parallel": ep,
        "expert_parallel": ep,
        "hardware": {"device": "cpu"},
    }, source=f"bench case {model}")


def spread(times: list[float]) -> float:
    if len(times) < 4:
        return 0.0
    q = statistics.quantiles(times, n=4)
    return (q[2] - q[0]) / 2 / statistics.median(times)


def run_case(runtime: str, model: str, schedule: str, m: int, partition: str, profile, steps: int, warmup: int,
             work: Path, expert_parallel: int = 1) -> Case:
    from ppexec.results.prediction_check import validate
    from ppsim.trace.metrics import step_time_ms

    t0 = time.perf_counter()
    ep = expert_parallel
    s = scenario(model, schedule, m, partition, SCHEDULES[runtime][schedule], ep)
    name = f"{runtime}-{model}-ep{ep}-{schedule}-m{m}-{partition}"
    folder = work / name
    k = 1
    while folder.exists():  # a repeat of a case: its own folder
        folder, k = work / f"{name}-{k}", k + 1
    v = validate(s, profile, folder, steps=steps, warmup=warmup, runtime=runtime)
    seconds = time.perf_counter() - t0
    c = v.comparison
    blocks = v.scenario.pipeline.partition
    assert isinstance(blocks, list)
    return Case(runtime=runtime, model=model, schedule=schedule, microbatches=m, partition=partition, blocks=list(blocks),
                predicted_ms=c.predicted_step_time_ms, measured_ms=c.measured_step_time_ms,
                step_time_error=c.step_time_error, max_bubble_error_pp=v.max_abs_bubble_error_pp,
                spread=spread([step_time_ms(t) for t in v.run.traces]), seconds=seconds, expert_parallel=ep,
                alltoall_ms=statistics.median(t.meta["alltoall_ms"][0] for t in v.run.traces)
                if "alltoall_ms" in v.run.representative.meta else None,
                routing_skew=statistics.mean(t.meta["routing_skew"] for t in v.run.traces)
                if "routing_skew" in v.run.representative.meta else None,
                routed_error=v.run_routing.error if v.run_routing else None)


def row(c: Case) -> str:
    model = c.model + (f" ep{c.expert_parallel}" if c.expert_parallel > 1 else "")
    a2a = f"  all-to-alls {c.alltoall_ms:.1f} ms" if c.alltoall_ms is not None else ""
    a2a += f", routing skew {c.routing_skew:.2f}" if c.routing_skew is not None else ""
    a2a += f" (predicted at it: {100 * c.routed_error:+.2f}%)" if c.routed_error is not None else ""
    return (f"{c.runtime:9} {model:6} {c.schedule:16} {c.microbatches:>3} {c.partition:9} {'/'.join(map(str, c.blocks)):7} "
            f"{c.predicted_ms:9.2f} {c.measured_ms:9.2f} {100 * c.step_time_error:+7.2f}% "
            f"{c.max_bubble_error_pp:9.2f} {100 * c.spread:6.1f}%{a2a}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="small,medium", help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3,
                    help="run each model's first case this many times in all, to show the run-to-run noise floor")
    ap.add_argument("--runtimes", default="deepspeed,torch", help="comma-separated: deepspeed, torch")
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved-1f1b,zb-h1",
                    help="comma-separated; each runtime runs those it can")
    ap.add_argument("--microbatches", default="2,4,8,16")
    ap.add_argument("--partitions", default="balanced,uneven")
    ap.add_argument("--steps", type=int, default=12, help="recorded steps per run (the median step is compared)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="write the cases and the summary here")
    args = ap.parse_args()
    from ppexec.measure.profile import DRIFT_WARNING, drift_between_runs, measure_profile
    from ppsim.plan.schedules import describe as get_schedule

    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    runtimes = args.runtimes.split(",")
    if any(r not in SCHEDULES for r in runtimes):
        ap.error(f"unknown runtime in {runtimes}; choose from {list(SCHEDULES)}")
    if "moe" in models and runtimes != ["torch"]:
        ap.error("the moe model runs in the torch runtime only: add --runtimes torch")
    schedules = args.schedules.split(",")
    mbs = [int(x) for x in args.microbatches.split(",")]
    partitions = args.partitions.split(",")
    cases: list[Case] = []
    drifts: list[float] = []
    print(f"{'runtime':9} {'model':6} {'schedule':16} {'m':>3} {'partition':9} {'blocks':7} {'pred ms':>9} "
          f"{'meas ms':>9} {'error':>8} {'bubble pp':>9} {'spread':>7}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ppsim-accuracy-") as tmp:
        work = Path(tmp)
        for runtime in runtimes:
            for model in models:
                t0 = time.perf_counter()
                profile = measure_profile(scenario(model, "1f1b", 4, "balanced"), runtime=runtime)
                drift = drift_between_runs(profile)
                o1, o2 = profile.overheads["first"], profile.overheads["last"]
                measured = profile.moe_block or profile.block  # a mixture of experts: its MoE block
                print(f"# {runtime} {model}: profiled in {time.perf_counter() - t0:.0f} s: "
                      f"{'MoE ' if profile.moe_block else ''}block F "
                      f"{measured.forward_ms:.2f} ms, B {measured.backward_ms:.2f} ms; overheads first "
                      f"F {o1.forward_ms:.2f} B {o1.backward_ms:.2f}, last F {o2.forward_ms:.2f} B {o2.backward_ms:.2f} ms; "
                      f"link {profile.link.latency_us:.0f} us + {profile.link.bandwidth_gb_s:.2f} GB/s; the machine's "
                      f"speed between its runs {'unknown' if drift is None else f'{100 * drift:.0f} % apart'}"
                      f"{' (over 10 %: the fit absorbed it)' if drift is not None and drift > DRIFT_WARNING else ''}"
                      + (f"; routing skew at EP 2 {profile.routing_skew[2]:.2f} (what the EP 2 plans are priced at)"
                         if 2 in profile.routing_skew else ""), flush=True)
                first: Case | None = None
                for schedule in [x for x in schedules if x in SCHEDULES[runtime]]:
                    # 4 blocks over 2 ranks x 2 chunks leave one partition only: balanced
                    kinds = partitions if SCHEDULES[runtime][schedule] == 1 else ["balanced"]
                    for m in mbs:
                        if get_schedule(schedule).microbatches.nearest(2, m, SCHEDULES[runtime][schedule]):
                            print(f"# {schedule} does not run m = {m} on 2 ranks: skipped", flush=True)
                            continue
                        for partition in kinds:
                            c = run_case(runtime, model, schedule, m, partition, profile, args.steps, args.warmup,
                                         work)
                            cases.append(c)
                            first = first or c
                            print(row(c), flush=True)
                if MODELS[model].get("moe") and runtime == "torch":  # its experts over 2 replicas: one stage
                    for m in mbs:
                        c = run_case(runtime, model, "1f1b", m, "balanced", profile, args.steps, args.warmup, work,
                                     expert_parallel=2)
                        cases.append(c)
                        print(row(c), flush=True)
                if first is not None and args.repeats > 1:
                    again = [first] + [run_case(runtime, first.model, first.schedule, first.microbatches,
                                                first.partition, profile, args.steps, args.warmup, work)
                                       for _ in range(args.repeats - 1)]
                    for c in again[1:]:
                        print(row(c) + "  (repeat)", flush=True)
                    meds = [c.measured_ms for c in again]
                    drift = (max(meds) - min(meds)) / statistics.median(meds)
                    drifts.append(drift)
                    print(f"# {runtime} {model}: the same case measured {len(again)} times: "
                          f"{', '.join(f'{x:.1f}' for x in meds)} ms, range {100 * drift:.1f}% of the median",
                          flush=True)
    errors = [abs(c.step_time_error) for c in cases]
    med, worst = statistics.median(errors), max(errors)
    bubble = max(c.max_bubble_error_pp for c in cases)
    noise = statistics.median(c.spread for c in cases)
    signed = statistics.median(c.step_time_error for c in cases)

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print()
    print("per runtime, schedule and expert parallelism: cases, median |step-time error|, max |step-time error|")
    for runtime in runtimes:
        for schedule in schedules:
            for ep in (1, 2):
                mine = [abs(c.step_time_error) for c in cases
                        if (c.runtime, c.schedule, c.expert_parallel) == (runtime, schedule, ep)]
                routed = [abs(c.routed_error) for c in cases if c.routed_error is not None
                          and (c.runtime, c.schedule, c.expert_parallel) == (runtime, schedule, ep)]
                if mine:
                    print(f"  {runtime:9} {schedule:16} ep{ep} {len(mine):>3}   {100 * statistics.median(mine):6.2f}%   "
                          f"{100 * max(mine):6.2f}%" + (f"   at the runs' routing: {100 * statistics.median(routed):.2f}%"
                                                       f" {100 * max(routed):.2f}%" if routed else ""))
    print(f"cases: {len(cases)}   median |step-time error| {100 * med:.2f}% "
          f"(target <= {100 * TARGET_MEDIAN:.0f}%): {verdict(med <= TARGET_MEDIAN)}")
    print(f"max |step-time error| {100 * worst:.2f}% (target <= {100 * TARGET_MAX:.0f}%): {verdict(worst <= TARGET_MAX)}")
    print(f"max per-stage bubble error {bubble:.2f} pp (target <= {TARGET_BUBBLE_PP:.0f} pp): "
          f"{verdict(bubble <= TARGET_BUBBLE_PP)}")
    print(f"median signed error {100 * signed:+.2f}%  (bias of the model)")
    print(f"median step-to-step spread of the runs {100 * noise:.1f}%  (noise within one measurement)")
    if drifts:
        print(f"run-to-run range of one case's median step {', '.join(f'{100 * d:.1f}%' for d in drifts)}  "
              "(noise between measurements: no prediction can be closer than this)")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({
            "cases": [asdict(c) for c in cases],
            "median_abs_step_time_error": med, "max_abs_step_time_error": worst,
            "max_bubble_error_pp": bubble, "median_signed_error": signed, "median_spread": noise,
            "run_to_run_range": drifts,
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
