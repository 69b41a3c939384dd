"""A step time no plan of one stage per rank can beat on given costs and activation budgets."""

from __future__ import annotations

from collections.abc import Sequence

from ppsim.plan.order_search.timeline import Timing


def lower_bound(p: int, m: int, timing: Timing, budget: Sequence[float]) -> float:
    """A step time no plan of one stage per rank can beat on these costs and budgets
    (communication as its latency alone). For each stage s, with k the micro-batches its budget
    holds:

    - its first input grad cannot start before micro-batch 0 has gone forward through every stage
      and its input grads back to s; before that the stage can only run forwards, at most k of
      them: so it ends no earlier than that start (or its k forwards, if later) plus all its
      work left;
    - its last input grad ends no earlier than that start plus all its work but the weight grads
      it can still owe then (at most k: each holds its activations), and after it come the input
      grads of that micro-batch on every stage below and stage 0's last weight grad.

    The bound is the most of these over the stages."""
    forward, grad, weight, lag = timing.forward, timing.input_grad, timing.weight_grad, timing.latency
    down = [0.0] * p  # when micro-batch 0's activations can reach stage s
    for s in range(1, p):
        down[s] = down[s - 1] + forward[s - 1] + lag[s - 1]
    up = [0.0] * p  # when stage s's first input grad can start
    up[-1] = down[-1] + forward[-1]
    for s in reversed(range(p - 1)):
        up[s] = up[s + 1] + grad[s + 1] + lag[s]
    below = [0.0] * p  # after stage s's last input grad: the stages below's, and stage 0's last weight grad
    for s in range(1, p):
        below[s] = below[s - 1] + lag[s - 1] + grad[s - 1] + (weight[0] if s == 1 else 0.0)
    best = 0.0
    for s in range(p):
        held = min(float(m), budget[s] / timing.activation[s])
        early = int(held + 1e-9) * forward[s]  # the forwards it may run before its first input grad
        begin = max(up[s], down[s] + early)
        work = m * (forward[s] + timing.backward[s]) - early
        owed = min(int(held + 1e-9), m) * weight[s]  # weight grads it may still owe at its last input grad
        best = max(best, begin + work, begin + work - owed + below[s])
    return best
