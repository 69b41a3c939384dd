"""Sends and receives for posted (non-blocking) sends, and whether a plan can finish at all.

With posted sends a receive goes right before the action that consumes it and a send right after
the action that produced it, so every rank's lowered order follows from its own order alone:
:func:`posted_order` places them rank by rank. Then, where two ranks would receive each other's
messages in another order than they were sent, :func:`~ppsim.plan.lower.in_receive_order` moves
the sends. Whether the plan can finish (its dependencies leave no cycle) is a separate question,
:func:`finishes`: it walks the ranks as their inputs become available (as
:func:`~ppsim.plan.deps.ideal_times` does, without times). A plan a registered schedule built is
known to finish, so lowering asks only of other plans.

Both passes know a message or a piece of work by a flag number in three blocks (a forward done, an
input grad I done, a stage's input grad made by its B or its I), each indexed ``stage *
microbatches + microbatch``: a weight grad W waits for its I, a backward for its forward and the
next stage's input grad, and a message is known by the flag of what it carries. A search lowers
thousands of plans and the TUI one per key, so neither pass hashes actions.
"""

from __future__ import annotations

from ppsim.plan.action import Action, Kind, new_action
from ppsim.plan.plan import Plan


def posted_order(plan: Plan) -> tuple[list[list[Action]], bool]:
    """(every rank's actions with its sends and receives, whether every pair of ranks receives in
    the order of sending): each receive right before its consumer, each send right after its producer."""
    acts, where = plan.actions, plan.stage_to_rank
    n_stages, m = len(where), plan.num_microbatches
    last, made_grad = n_stages - 1, 2 * n_stages * m  # the block of flags of the input grads made
    F, B, I, OVERLAP = Kind.F, Kind.B, Kind.I, Kind.OVERLAP_F_B
    SEND_F, SEND_B, RECV_F, RECV_B = Kind.SEND_F, Kind.SEND_B, Kind.RECV_F, Kind.RECV_B
    act = new_action
    # per directed pair of ranks, the flags of its messages in send order and in receive order;
    # forward[s] / backward[s]: the pair that stage s's activations / input grads cross (None: same rank)
    pairs: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    def pair(src: int, dst: int) -> tuple[list[int], list[int]] | None:
        return None if src == dst else pairs.setdefault((src, dst), ([], []))

    forward = [pair(where[s], where[s + 1]) for s in range(last)] + [None]
    backward = [None] + [pair(where[s], where[s - 1]) for s in range(1, n_stages)]
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
            for s, k, mb in a.parts:  # the receives, right before
                assert mb is not None  # an overlap's parts are an F and a B or I
                if k is F:
                    if s and (link := forward[s - 1]) is not None:
                        add(act((s, RECV_F, mb)))
                        link[1].append(s * m + mb - m)
                elif s < last and (link := backward[s + 1]) is not None:
                    add(act((s, RECV_B, mb)))
                    link[1].append(made_grad + s * m + mb + m)
            add(a)
            for s, k, mb in a.parts:  # the sends, right after
                assert mb is not None
                link = forward[s] if k is F else backward[s]
                if link is not None:
                    add(act((s, SEND_F if k is F else SEND_B, mb)))
                    link[0].append(s * m + mb if k is F else made_grad + s * m + mb)
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
    size, last = n_stages * m, n_stages - 1
    made_i, made_grad = size, 2 * size  # the blocks of flags after the forwards'
    F, B, I, W, OVERLAP = Kind.F, Kind.B, Kind.I, Kind.W, Kind.OVERLAP_F_B
    done = bytearray(3 * size)  # blocks: forward done, input grad (I) done, input grad (B or I) made
    waiting: list[list[int] | None] = [None] * (3 * size)  #: per flag, the ranks parked on it
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
                if s and not done[at - m]:
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
                if s < last and not done[made_grad + at + m]:
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
            parts = a.parts if k is OVERLAP else (a,)
            blocked = -1
            for s, k, mb in parts:  # inputs: previous stage's forward; own forward and next stage's grad; own I
                if k is F:
                    assert mb is not None  # compute actions carry a micro-batch
                    if s and not done[at := s * m + mb - m]:
                        blocked = at
                        break
                elif k is B or k is I:
                    assert mb is not None
                    at = s * m + mb
                    if not done[at]:
                        blocked = at
                        break
                    if s < last and not done[made_grad + at + m]:
                        blocked = made_grad + at + m
                        break
                elif k is W:
                    assert mb is not None
                    if not done[at := made_i + s * m + mb]:
                        blocked = at
                        break
            if blocked >= 0:  # the rank that makes it wakes this one
                _park(waiting, blocked, r)
                break
            for s, k, mb in parts:  # what it makes; then what waited on it
                if k is F:
                    assert mb is not None
                    made: tuple[int, ...] = (s * m + mb,)
                elif k is B or k is I:
                    assert mb is not None
                    at = s * m + mb
                    made = (made_grad + at, made_i + at) if k is I else (made_grad + at,)
                else:
                    continue  # a weight grad (or a step-level action) feeds nothing another waits on
                for flag in made:
                    done[flag] = 1
                    if (woken := waiting[flag]) is not None:
                        waiting[flag] = None
                        work.extend(woken)
            i += 1
        pos[r] = i
    return all(pos[r] == len(ra) for r, ra in enumerate(acts))
