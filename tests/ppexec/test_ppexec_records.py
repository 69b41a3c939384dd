"""What the launcher and a rank exchange, as pydantic models: the event lines a rank writes
(``ppexec.worker.events``, a discriminated union read by one TypeAdapter) and ``run.json``
(``ppexec.worker.run_spec.RunSpec``, strict, unknown fields refused). Both keep their on-disk
format: lines and files written before these were models read as they did, and the other way round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SCENARIOS
from ppexec.worker.events import Done, Failure, Measure, RankState, Ready, Step, decode, encode, read_events
from ppexec.worker.run_spec import RunSpec
from ppsim.errors import PpsimError
from ppsim.inputs.scenario import load

#: lines as ppexec wrote them before its events were pydantic models (docs/ppexec.md shows the same)
WRITTEN_BEFORE = [
    '{"type": "ready", "rank": 0, "pipe_rank": 0, "replica": 0, "tp_rank": 0, "host": "vm", "clock_ns": 4179235661217, '
    '"pid": 9253, "backend": "gloo", "runtime": "torch"}',
    '{"type": "step", "step": 0, "loss": null, "spans": [["0F0", 2562670311409, 2562672978673]], "marks": [], '
    '"memory": [[2562672978673, 362799104]], "memory_source": "rss", "forwards": {"block": 8, "attention_core": 8}}',
    '{"type": "measure", "name": "link", "data": [[1024, 0.1, 0.09, 0.11]]}',
    '{"type": "error", "rank": 1, "action": "1RECV_F0", "error": "RuntimeError: Timed out", "traceback": "..."}',
    '{"type": "done", "rank": 0}',
]


def test_lines_written_before_read_back_and_are_written_again_byte_for_byte() -> None:
    events = [decode(line) for line in WRITTEN_BEFORE]
    assert [type(e) for e in events] == [Ready, Step, Measure, Failure, Done]
    assert [encode(e) for e in events] == WRITTEN_BEFORE


def test_json_lists_come_back_as_the_tuples_they_were() -> None:
    step = Step(step=2, loss=1.5, spans=[("0F0", 1, 2), ("0B0", 3, 4)], marks=[("clip", 3)], memory=[(2, 100)])
    again = decode(encode(step))
    assert again == step
    assert isinstance(again, Step)
    assert all(type(x) is tuple for x in (*again.spans, *again.marks, *again.memory))


def test_fields_a_reader_does_not_know_are_skipped() -> None:
    assert decode('{"type": "done", "rank": 3, "exit_code": 0}') == Done(rank=3)


@pytest.mark.parametrize("line, says", [
    ("\x00garbage{{", "Invalid JSON"),
    ("[1, 2]", "not a ppexec event"),
    ('{"rank": 1}', "not a ppexec event"),
    ('{"type": "finished", "rank": 1}', "not a ppexec event"),
    ('{"type": "step", "step": "first", "loss": null, "spans": 7}',
     "a 'step' event whose fields are wrong: step (str), spans (int)"),
    ('{"type": "step", "step": 0, "loss": null, "spans": [["0F0", 1]]}', "spans.0.2 (missing)"),
    ('{"type": "step", "step": 0, "loss": null, "spans": [["0F0", 1, "2"]]}', "spans.0.2 (str)"),
    ('{"type": "done", "rank": 1.0}', "rank (float)"),  # JSON's types as written: no float for an int
    ('{"type": "done", "rank": true}', "rank (bool)"),  # nor a bool
    ('{"type": "ready", "rank": 0}', "pipe_rank (missing)"),
])
def test_a_wrong_line_is_refused_naming_its_fields(line: str, says: str) -> None:
    with pytest.raises(ValueError) as exc:
        decode(line)
    assert says in str(exc.value)


def test_an_int_is_a_float_as_json_writes_it() -> None:
    step = decode('{"type": "step", "step": 0, "loss": 2, "spans": []}')
    assert isinstance(step, Step) and step.loss == 2.0


def test_events_are_read_into_each_ranks_state(tmp_path: Path) -> None:
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank-0.jsonl").write_text("\n".join(WRITTEN_BEFORE) + "\n" + '{"type": "done", "rank"')
    st = RankState(0)
    read_events(tmp_path, [st])
    assert st.ready is not None and st.ready.runtime == "torch" and len(st.steps) == 1
    assert st.error is not None and st.error.action == "1RECV_F0"
    assert st.measurements == {"link": [[1024, 0.1, 0.09, 0.11]]} and st.done
    assert st.lines == len(WRITTEN_BEFORE)  # the unfinished last line waits for its newline
    (tmp_path / "ranks" / "rank-0.jsonl").write_text('{"type": "nothing"}\n')
    with pytest.raises(PpsimError, match=r"rank-0.jsonl: line 1 is not a ppexec event"):
        read_events(tmp_path, [RankState(0)])


# ----- run.json ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spec() -> RunSpec:
    from ppexec.launch.prepare import prepare

    prepared = prepare(load(SCENARIOS / "tiny-cpu.yaml"))
    return RunSpec(scenario=prepared.scenario, plan=prepared.plan, partition=prepared.partition,
                   runtime=prepared.runtime, world_size=2, steps=2, extra={"note": [1, 2]})


def test_run_json_reads_back_what_was_written(tmp_path: Path, spec: RunSpec) -> None:
    spec.write(tmp_path)
    doc = json.loads((tmp_path / "run.json").read_text())
    # the keys in the order ppexec always wrote them
    assert list(doc) == ["scenario", "plan", "partition", "runtime", "world_size", "steps", "warmup", "seed", "lr",
                         "timeout_s", "backend", "save_params", "mode", "extra", "format"]
    again = RunSpec.read(tmp_path)
    assert again == spec
    assert again.model == spec.scenario.model


def test_run_json_of_before_two_runtimes_runs_deepspeed(tmp_path: Path, spec: RunSpec) -> None:
    spec.write(tmp_path)
    doc = json.loads((tmp_path / "run.json").read_text())
    del doc["runtime"]
    doc["lr"] = 1  # JSON's int where a float is due
    (tmp_path / "run.json").write_text(json.dumps(doc))
    again = RunSpec.read(tmp_path)
    assert again.runtime == "deepspeed" and again.lr == 1.0


@pytest.mark.parametrize("change, says", [
    ({"steps": "three"}, "steps (str)"),
    ({"colour": "blue"}, "colour (unknown)"),
    ({"world_size": None}, "world_size (NoneType)"),
    ({"save_params": 1}, "save_params (int)"),
    ({"partition": [1.5, 2]}, "partition.0 (float)"),
    ({"scenario": [1]}, "scenario (list)"),
])
def test_a_damaged_run_json_is_refused_naming_its_fields(tmp_path: Path, spec: RunSpec, change: dict, says: str) -> None:
    spec.write(tmp_path)
    doc = json.loads((tmp_path / "run.json").read_text())
    (tmp_path / "run.json").write_text(json.dumps({**doc, **change}))
    with pytest.raises(PpsimError, match="is damaged or not ppexec's") as exc:
        RunSpec.read(tmp_path)
    assert says in str(exc.value) and "run.json" in str(exc.value)
