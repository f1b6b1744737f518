"""FlexAttention as torchtitan 0.3.0 uses it (torchtitan/models/common/attention.py, rewritten here: torchtitan is
not installed): a class-level ``torch.compile(flex_attention, options=...)`` with its Inductor options, block masks
from a compiled ``create_block_mask`` on "cuda" (packed documents composed with causal), q/k/v in
(batch, length, heads, dim) transposed for the call, GQA, forward and backward. Written for CUDA; run under the
CUDA layer:

    hybrid run flex_torchtitan.py OUT.json

Its reference is tests/support/flex_reference.py on the CPU in the same process (float64 plain attention with
the same mask, autograd's gradients): torch refuses FlexAttention's backward on the CPU. OUT.json gets each
result's largest error relative to the reference's largest magnitude, the block mask's computed fraction, and the
timeline's flex records.
"""

import json
import sys

import torch
from torch.nn.attention.flex_attention import AuxRequest, and_masks, create_block_mask, flex_attention

from tests.support import flex_reference as reference

B, L, HQ, HKV, D = 2, 256, 4, 2, 16


class FlexAttention(torch.nn.Module):
    inductor_configs = {
        "wrap_inductor_compiled_regions": True,
        "max_autotune": True,
        "coordinate_descent_tuning": True,
        "triton.cudagraphs": False,
    }
    _compiled_flex_attn = torch.compile(flex_attention, options=inductor_configs)

    def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks, enable_gqa=False):
        q, k, v = (t.transpose(1, 2) for t in (q_BLNH, k_BLNH, v_BLNH))
        out, _ = FlexAttention._compiled_flex_attn(q, k, v, score_mod=None, block_mask=attention_masks, scale=None,
                                                   enable_gqa=enable_gqa, return_aux=AuxRequest(lse=False),
                                                   kernel_options={})
        return out.transpose(1, 2)


_compiled_create_block_mask = torch.compile(create_block_mask)


def get_causal_mask_mod():
    def _causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    return _causal_mask


def get_document_mask_mod(positions):
    doc_ids = torch.cumsum((positions == 0).int(), dim=1) - 1

    def document_mask(b, h, q_idx, kv_idx):
        return doc_ids[b, q_idx] == doc_ids[b, kv_idx]
    return document_mask


def positions_of(lengths_per_row, device):
    rows = [torch.cat([torch.arange(n) for n in lengths]) for lengths in lengths_per_row]
    return torch.stack(rows).to(device)


def run(device):
    generator = torch.Generator().manual_seed(0)
    host = [torch.randn(B, L, heads, D, generator=generator) for heads in (HQ, HKV, HKV)]
    lengths = [[128, 128], [64, 64, 128]]  # a later document never sees an earlier one's block

    def mask_for(dev):
        return and_masks(get_causal_mask_mod(), get_document_mask_mod(positions_of(lengths, dev)))

    block_mask = _compiled_create_block_mask(mask_for(device), B, None, L, L, device=device)
    q, k, v = (t.to(device).requires_grad_() for t in host)
    out = FlexAttention()(q, k, v, attention_masks=block_mask, enable_gqa=True)
    out.square().sum().backward()

    qr, kr, vr = (t.double().transpose(1, 2).requires_grad_() for t in host)
    want, _ = reference.attention(qr, kr, vr, mask_mod=mask_for("cpu"), enable_gqa=True)
    want = want.transpose(1, 2)
    want.square().sum().backward()
    errors = {}
    for what, got, ref in (("out", out, want), ("grad q", q.grad, qr.grad.transpose(1, 2)),
                           ("grad k", k.grad, kr.grad.transpose(1, 2)), ("grad v", v.grad, vr.grad.transpose(1, 2))):
        errors[what] = ((got.detach().cpu().double() - ref.detach()).abs().max() / ref.abs().max()).item()
    computed, every = reference.computed_blocks(reference.dense_mask(mask_for("cpu"), B, 1, L, L))
    return block_mask, {"errors": errors, "fraction": computed / every, "batch": B, "heads": HQ, "length": L,
                        "dim": D}


def main(path):
    import interop  # the layer's process has it: the records of the calls

    interop.reset_timeline()
    block_mask, result = run("cuda")
    records = [r for r in interop.timeline() if "flex" in r.op]
    result["records"] = [r.op for r in records]
    result["forward_flops"] = records[0].flops if records else None
    result["mask_device"] = str(block_mask.kv_num_blocks.device)
    result["mask_is_cuda"] = block_mask.kv_num_blocks.is_cuda
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
