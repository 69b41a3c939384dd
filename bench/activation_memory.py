"""ppsim's activation memory per block and micro-batch against what ppexec's blocks really save for
their backward (issue 35), measured exactly: the bytes of every tensor autograd saves during the
block's forward, each storage once, its parameters left out (``ppexec.measure.activations``). No
allocator and no process size, so the figures are the same on any machine and need no device.

Prints, per block (GPT-style dense blocks at three sizes, bf16 and fp32, without and with selective
recomputation; ppexec's mixture-of-experts block), the predicted and measured bytes and their
ratio. Needs torch (``make test`` installs it).

    python bench/activation_memory.py
"""

from __future__ import annotations

import torch

from ppexec.measure.activations import pending_weight_grad_bytes, saved_activation_bytes
from ppexec.runtimes.model import Block
from ppsim.api import ModelSpec
from ppsim.costs.layers import gpt_layers
from ppsim.costs.moe import ExpertShard

DENSE = [(128, 4, 256, 4), (256, 2, 512, 8), (512, 1, 768, 12)]  #: (seq_len, micro_batch, hidden, heads)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def row(what: str, spec: ModelSpec, batch: int, recompute: str, moe: bool = False, flash: bool = True) -> str:
    dtype = DTYPES[spec.dtype]
    block = Block(spec, 0, selective=recompute == "selective", moe=moe, fused=flash).to(dtype)
    x = torch.randn(batch, spec.seq_len, spec.hidden, dtype=dtype, requires_grad=True)
    measured, _ = saved_activation_bytes(block, x, parameters=block.parameters())
    experts = ExpertShard.of(spec, 1) if moe else None
    predicted = gpt_layers(spec, batch, recompute, flash_attention=flash,  # type: ignore[arg-type]
                           experts=experts)[1].activation_bytes
    mode = recompute + ("" if flash else ", unfused")
    return (f"{what:<44} {mode:<18} {spec.dtype:<4} {predicted / 2**20:10.2f} {measured / 2**20:10.2f} "
            f"{measured / predicted:7.3f}")


def main() -> None:
    torch.manual_seed(0)
    print(f"{'block (s, b, h, heads)':<44} {'recompute':<18} {'type':<4} {'pred. MiB':>10} {'meas. MiB':>10} "
          f"{'ratio':>7}")
    for family, keys in (("GPT", {}), ("Llama", {"mlp": "swiglu", "positions": "rope"})):
        for s, b, h, a in DENSE:
            gqa = {"kv_heads": a // 4} if family == "Llama" else {}
            for dtype in DTYPES:
                spec = ModelSpec(layers=2, hidden=h, heads=a, seq_len=s, vocab=1000, dropout=False, dtype=dtype,
                                 **keys, **gqa)  # type: ignore[arg-type]
                for recompute in ("none", "selective"):
                    print(row(f"{family} dense ({s}, {b}, {h}, {a})", spec, b, recompute))
                print(row(f"{family} dense ({s}, {b}, {h}, {a})", spec, b, "none", flash=False))
    spec = ModelSpec(layers=2, hidden=256, heads=4, seq_len=128, vocab=1000, dropout=False, dtype="fp32",
                     moe={"experts": 4, "top_k": 2, "ffn_hidden": 512})
    print(row("ppexec MoE, 4 experts, top-2 (128, 2, 256, 4)", spec, 2, "none", moe=True))
    print("\nsplit backward (torch's stage_backward_input, then _weight): held between a block's input grad and its"
          " weight grad,\nagainst what its forward saved (ppsim's model keeps the forward's, no more)")
    print(f"{'block (s, b, h, heads)':<44} {'type':<4} {'forward MiB':>12} {'pending MiB':>12} {'ratio':>7}")
    for family, keys in (("GPT", {}), ("Llama", {"mlp": "swiglu", "positions": "rope"})):
        for s, b, h, a in DENSE:
            gqa = {"kv_heads": a // 4} if family == "Llama" else {}
            spec = ModelSpec(layers=2, hidden=h, heads=a, seq_len=s, vocab=1000, dropout=False, dtype="bf16",
                             **keys, **gqa)  # type: ignore[arg-type]
            block = Block(spec, 0).to(torch.bfloat16)
            x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
            pending, forward = pending_weight_grad_bytes(block, x, torch.randn(b, s, h, dtype=torch.bfloat16))
            print(f"{family + f' dense ({s}, {b}, {h}, {a})':<44} bf16 {forward / 2**20:12.2f} {pending / 2**20:12.2f} "
                  f"{pending / forward:7.3f}")


if __name__ == "__main__":
    main()
