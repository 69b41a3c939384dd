"""Action text form and Plan serialisation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppsim.errors import PlanError
from ppsim.plan import STEP_KINDS, Action, Kind, Overlap, Plan, lower, schedules

kinds = st.sampled_from([k for k in Kind if k is not Kind.OVERLAP_F_B])


@given(stage=st.integers(0, 10_000), kind=kinds, mb=st.integers(0, 10_000))
def test_action_text_round_trip(stage: int, kind: Kind, mb: int) -> None:
    a = Action(stage, kind, None if kind in STEP_KINDS else mb)
    assert Action.parse(str(a)) == a
    assert hash(Action.parse(str(a))) == hash(a)


@given(f=st.tuples(st.integers(0, 999), st.integers(0, 999)), b=st.tuples(st.integers(0, 999), st.integers(0, 999)),
       backward=st.sampled_from([Kind.B, Kind.I]))
def test_overlapped_action_text_round_trip(f: tuple[int, int], b: tuple[int, int], backward: Kind) -> None:
    a = Overlap.of(Action(f[0], Kind.F, f[1]), Action(b[0], backward, b[1]))
    text = str(a)
    assert text == f"({f[0]}F{f[1]};{b[0]}{backward.value}{b[1]})OVERLAP_F_B"  # torch's form
    assert Action.parse(text) == a and hash(Action.parse(text)) == hash(a)
    assert a.parts == (a.forward, a.backward) and a.kind is Kind.OVERLAP_F_B and a.lane == "compute"


@pytest.mark.parametrize("bad", ["(0F3)OVERLAP_F_B", "(0F3;1B2;2B0)OVERLAP_F_B", "(0B3;1F2)OVERLAP_F_B",
                                 "(0F3;1W2)OVERLAP_F_B", "(0F3;1B2)", "0OVERLAP_F_B3", "(0F3;1X2)OVERLAP_F_B"])
def test_malformed_overlapped_actions_are_refused(bad: str) -> None:
    with pytest.raises(PlanError):
        Action.parse(bad)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2F0", Action(2, Kind.F, 0)),
        ("0SEND_F3", Action(0, Kind.SEND_F, 3)),
        ("13RECV_B12", Action(13, Kind.RECV_B, 12)),
        ("1OPT", Action(1, Kind.OPT, None)),
        ("4REDUCE_GRAD", Action(4, Kind.REDUCE_GRAD, None)),
        ("3W7", Action(3, Kind.W, 7)),
    ],
)
def test_action_parse_examples(text: str, expected: Action) -> None:
    assert Action.parse(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("bad", ["", "F0", "2X0", "2F", "1OPT3", "abc", "2SEND_F"])
def test_action_parse_rejects_bad_text(bad: str) -> None:
    with pytest.raises(PlanError, match="not an action"):
        Action.parse(bad)


@pytest.mark.parametrize("name,v", [("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1), ("gpipe", 1)])
def test_plan_json_and_csv_round_trip(name: str, v: int) -> None:
    plan = lower(schedules.build(name, 4, 8, v), 2)
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert [list(r) for r in plan.actions] == Plan.actions_from_csv(plan.to_csv())


def test_plan_from_dict_rejects_other_documents() -> None:
    with pytest.raises(PlanError, match="format"):
        Plan.from_dict({"format": "something-else"})
    with pytest.raises(PlanError, match="lacks the field"):
        Plan.from_dict({"format": "ppsim-plan"})


def test_a_saved_lowered_plan_reads_back_under_the_sends_it_was_lowered_for(tmp_path) -> None:
    """ZB-V lowered for posted sends (gpt.yaml's comm: async) would deadlock if every send blocked:
    read back, it is checked against the semantics it was lowered for (recorded in its meta)."""
    from conftest import GPT_YAML, invoke
    from ppsim.cli import app

    path = tmp_path / "zbv.json"
    res = invoke(app, "plan", GPT_YAML, "--schedule", "zb-v", "--stages", "4", "--microbatches", "8", "--comms",
                 "--save", path)
    assert res.exit_code == 0, res.output
    assert Plan.from_json(path.read_text()).meta["sends"] == "posted"
    again = invoke(app, "plan", path)
    assert again.exit_code == 0, again.output
    assert lower(schedules.build("zb-v", 4, 8), rendezvous=True).meta["sends"] == "rendezvous"


def test_a_plan_pickles_with_its_read_only_meta_and_its_trust() -> None:
    """ppexec hands plans to its ranks' processes by pickle: the read-only meta comes back read-only,
    and a schedule's plan comes back known to be valid (its actions are still the ones vouched for)."""
    import pickle

    plan = lower(schedules.build("zb-v", 4, 8), rendezvous=True)
    back = pickle.loads(pickle.dumps(plan))
    assert back == plan and dict(back.meta) == dict(plan.meta) == {"sends": "rendezvous"}
    with pytest.raises(TypeError):
        back.meta["sends"] = "posted"  # type: ignore[index]
    built = schedules.build("1f1b", 4, 8)
    assert pickle.loads(pickle.dumps(built)).built_by_a_schedule
