"""The same model trained in one process without a pipeline: the ground truth of the parity checks."""

from __future__ import annotations

import torch

from ppexec.runtimes.model import loss_fn, reference_model, synthetic_batch
from ppsim.api import Scenario


def train_reference(s: Scenario, steps: int, seed: int, lr: float) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Train ``steps`` steps on every replica's micro-batches at once (gradient = mean over all of
    them, as data-parallel averaging of per-replica means gives) and return the mean loss of each
    step and the final weights, named as the pipeline's layers name them (``"<layer>.<param>"``)."""
    assert s.model is not None
    torch.manual_seed(seed)
    model = reference_model(s.model, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    m, d, b = s.microbatches, s.data_parallel, s.training.micro_batch
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        total = 0.0
        for replica in range(d):
            for mb in range(m):
                ids, labels = synthetic_batch(s.model, b, seed, step, replica, mb)
                loss = loss_fn(model(ids), labels)
                (loss / (m * d)).backward()
                total += loss.item()
        if s.training.grad_clip > 0:  # as DeepSpeed clips: the L2 norm over every gradient of the model
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.training.grad_clip)
        optimizer.step()
        losses.append(total / (m * d))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}
