"""Sends and receives for posted (non-blocking) sends, and whether a plan can finish at all.

With posted sends a receive goes right before the action that consumes it and a send right after
the action that produced it, so every rank's lowered order follows from its own order alone:
:func:`posted_order` places them rank by rank. Then, where two ranks would receive each other's
messages in another order than they were sent, :func:`~ppsim.plan.lower.in_receive_order` moves
the sends. Whether the plan can finish (its dependencies leave no cycle) is a separate question,
:func:`finishes`: it walks the ranks as their inputs become available (as
:func:`~ppsim.plan.deps.ideal_times` does, without times). A plan a registered schedule built is
known to finish, so lowering asks only of other plans.

Both passes know a message or a piece of work by its flag (:class:`~ppsim.plan.rules.FlagLayout`:
a block per :class:`~ppsim.plan.rules.Fact`, indexed ``stage * microbatches + microbatch``), follow
the dependency rule of :mod:`ppsim.plan.rules`, and know a message by the flag of what it carries.
The plain kinds' branches write the rule's arithmetic out, at C speed (a search lowers thousands of
plans and the TUI one per key, so neither pass hashes actions); overlapped pairs read the tables;
tests hold the two to the same placements.
"""

from __future__ import annotations

from ppsim.plan.action import Action, Kind, new_action
from ppsim.plan.plan import Plan
from ppsim.plan.rules import MAKES, NEEDS, RECEIVES, SENDS, Fact, FlagLayout


def posted_order(plan: Plan) -> tuple[list[list[Action]], bool]:
    """(every rank's actions with its sends and receives, whether every pair of ranks receives in
    the order of sending): each receive right before its consumer, each send right after its producer."""
    acts, where = plan.actions, plan.stage_to_rank
    n_stages, m = len(where), plan.num_microbatches
    layout = FlagLayout(n_stages, m)
    last, made_grad = n_stages - 1, layout.block(Fact.GRAD_MADE)
    F, B, I, OVERLAP = Kind.F, Kind.B, Kind.I, Kind.OVERLAP_F_B
    SEND_F, SEND_B, RECV_F, RECV_B = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B
    act = new_action
    # per directed pair of ranks, the flags of its messages in send order and in receive order;
    # forward[s] / backward[s]: the pair that stage s's activations / input grads cross (None: same rank)
    pairs: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    def pair(src: int, dst: int) -> tuple[list[int], list[int]] | None:
        return None if src == dst else pairs.setdefault((src, dst), ([], []))

    per_pipe = plan.stages_per_pipe  # a pipe's last stage sends no activations on, its first no grads back
    forward = [pair(where[s], where[s + 1]) if (s + 1) % per_pipe else None for s in range(last)] + [None]
    backward = [None] + [pair(where[s], where[s - 1]) if s % per_pipe else None for s in range(1, n_stages)]
    # the rules per kind, as (message kind, [sending stage's offset,] the links it crosses, first flag of its fact)
    receives = {k: tuple((kind, off, forward if off < 0 else backward, layout.block(f)) for kind, off, f in rule)
                for k, rule in RECEIVES.items()}
    sends = {k: tuple((kind, forward if off > 0 else backward, layout.block(f)) for kind, off, f in rule)
             for k, rule in SENDS.items()}
    out: list[list[Action]] = []
    for ra in acts:
        placed: list[Action] = []
        add = placed.append
        for a in ra:
            s, k, mb = a
            # plain actions each by its kind (the receive, the action, the send written out: the
            # common case, at C speed), overlapped pairs part by part below
            if k is F:
                assert mb is not None  # compute actions carry a micro-batch
                if s and (link := forward[s - 1]) is not None:
                    add(act((s, RECV_F, mb)))
                    link[1].append(s * m + mb - m)
                add(a)
                if (link := forward[s]) is not None:
                    add(act((s, SEND_F, mb)))
                    link[0].append(s * m + mb)
                continue
            if k is B or k is I:
                assert mb is not None
                if s < last and (link := backward[s + 1]) is not None:
                    add(act((s, RECV_B, mb)))
                    link[1].append(made_grad + s * m + mb + m)
                add(a)
                if (link := backward[s]) is not None:
                    add(act((s, SEND_B, mb)))
                    link[0].append(made_grad + s * m + mb)
                continue
            if k is not OVERLAP:  # a weight grad (or a step-level action): nothing crosses ranks
                add(a)
                continue
            # an overlapped pair, part by part, by the rules (rules.RECEIVES, rules.SENDS)
            for s, k, mb in a.parts:  # the receives, right before
                assert mb is not None  # an overlap's parts are an F and a B or I
                for recv, offset, links, base in receives[k]:
                    t = s + offset  # the sending stage: its message crosses its link towards s
                    if 0 <= t < n_stages and (link := links[t]) is not None:
                        add(act((s, recv, mb)))
                        link[1].append(base + t * m + mb)
            add(a)
            for s, k, mb in a.parts:  # the sends, right after
                assert mb is not None
                for send, links, base in sends[k]:
                    if (link := links[s]) is not None:
                        add(act((s, send, mb)))
                        link[0].append(base + s * m + mb)
        out.append(placed)
    return out, all(sent == received for sent, received in pairs.values())


def _park(waiting: list[list[int] | None], flag: int, rank: int) -> None:
    """Park ``rank`` until ``flag`` is set."""
    parked = waiting[flag]
    if parked is None:
        waiting[flag] = [rank]
    else:
        parked.append(rank)


def finishes(plan: Plan) -> bool:
    """Whether every rank of the compute-only ``plan`` gets to its end: each runs its actions in
    order as far as their inputs exist, parks on the first that waits, and is woken by the rank
    that makes it. False when some rank never finishes (a cycle of dependencies)."""
    acts, where = plan.actions, plan.stage_to_rank
    n_stages, m = len(where), plan.num_microbatches
    layout = FlagLayout(n_stages, m)
    per_pipe = plan.stages_per_pipe
    made_i, made_grad = layout.block(Fact.INPUT_GRAD), layout.block(Fact.GRAD_MADE)
    F, B, I, W, OVERLAP = Kind.F, Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B
    done = bytearray(layout.total)  # a flag per fact (rules.Fact) of each stage's micro-batch
    waiting: list[list[int] | None] = [None] * layout.total  #: per flag, the ranks parked on it
    # the rules as (stage offset, first flag of the fact's block), per kind
    needs = {k: tuple((off, layout.block(f)) for off, f in rule) for k, rule in NEEDS.items()}
    makes = {k: tuple(layout.block(f) for f in rule) for k, rule in MAKES.items()}
    pos = [0] * len(acts)
    work = list(range(len(acts)))
    while work:
        r = work.pop()
        ra = acts[r]
        i, n = pos[r], len(ra)
        while i < n:
            a = ra[i]
            s, k, mb = a
            # plain actions each by its kind, overlapped pairs part by part below (setting a flag and
            # waking what waited on it is written out at each place on purpose: a call per flag would
            # cost more than the walk's parking saves)
            if k is F:
                assert mb is not None  # compute actions carry a micro-batch
                at = s * m + mb
                if s % per_pipe and not done[at - m]:
                    _park(waiting, at - m, r)
                    break
                done[at] = 1
                if (woken := waiting[at]) is not None:
                    waiting[at] = None
                    work.extend(woken)
                i += 1
                continue
            if k is B or k is I:
                assert mb is not None
                at = s * m + mb
                if not done[at]:
                    _park(waiting, at, r)
                    break
                if s % per_pipe < per_pipe - 1 and not done[made_grad + at + m]:
                    _park(waiting, made_grad + at + m, r)
                    break
                at += made_grad
                done[at] = 1
                if (woken := waiting[at]) is not None:
                    waiting[at] = None
                    work.extend(woken)
                if k is I:
                    at += made_i - made_grad
                    done[at] = 1
                    if (woken := waiting[at]) is not None:
                        waiting[at] = None
                        work.extend(woken)
                i += 1
                continue
            if k is W:
                assert mb is not None
                if not done[at := made_i + s * m + mb]:
                    _park(waiting, at, r)
                    break
                i += 1
                continue
            # an overlapped pair (or another kind), part by part, by the rules (rules.NEEDS, rules.MAKES)
            parts = a.parts if k is OVERLAP else (a,)
            blocked = -1
            for s, k, mb in parts:
                for offset, base in needs.get(k, ()):
                    t = s + offset  # a stage of its pipe: the pipe's ends need nothing beyond them
                    if t // per_pipe == s // per_pipe and not done[at := base + t * m + mb]:  # type: ignore[operator]  # compute actions carry a micro-batch
                        blocked = at
                        break
                if blocked >= 0:
                    break
            if blocked >= 0:  # the rank that makes it wakes this one
                _park(waiting, blocked, r)
                break
            for s, k, mb in parts:  # what it makes; then what waited on it
                for base in makes.get(k, ()):
                    flag = base + s * m + mb  # type: ignore[operator]  # compute actions carry a micro-batch
                    done[flag] = 1
                    if (woken := waiting[flag]) is not None:
                        waiting[flag] = None
                        work.extend(woken)
            i += 1
        pos[r] = i
    return all(pos[r] == len(ra) for r, ra in enumerate(acts))
