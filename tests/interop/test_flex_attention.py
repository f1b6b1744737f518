"""FlexAttention on a Trainium and a GPU slot: eager and compiled, forward and backward, several masks and
score_mods, GQA, the log-sum-exp; one timeline record per call priced as attention over the computed blocks;
transformers' ``attn_implementation="flex_attention"``; torchtitan's compiled usage under the CUDA layer.

References (tests/support/flex_reference.py): torch's own ``flex_attention`` on the CPU (forward only: torch
refuses the CPU's backward), which runs the same dense math as a slot, so the forward is bit-equal; and plain
attention in float64 with the mask materialised from ``mask_mod`` and ``score_mod`` applied by broadcasting,
differentiated by autograd, for the outputs and every gradient (q, k, v and a captured score_mod tensor).
Float32 results are compared to it at ``REL`` of each tensor's largest magnitude: the slot sums over 256 keys
(a captured bias's gradient over all 2*4*256*256 scores) in float32, whose roundings add up to ~1e-6 of the
magnitude (measured: 7e-6 at most, the bias gradient).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

import interop
from tests.support import ROOT
from tests.support import flex_reference as reference

RACK = "trn3:1+h100:1"
SLOTS = {"trn3": 0, "h100": 1}
B, HQ, HKV, L, D = 2, 4, 2, 256, 16  # 128-token blocks: 2 x 2 per (batch, head)
REL = 3e-5
PREFIX, WINDOW, CAP = 64, 96, 2.0
TORCHTITAN_OPTIONS = {"wrap_inductor_compiled_regions": True, "max_autotune": True, "coordinate_descent_tuning": True,
                      "triton.cudagraphs": False}


@pytest.fixture(scope="module", autouse=True)
def rack():
    previous = interop.current_rack()
    rack = interop.Rack.from_spec(RACK)
    interop.set_rack(rack)
    yield rack
    interop.set_rack(previous)


@pytest.fixture(autouse=True)
def fresh():
    interop.set_recording(True)
    interop.reset_timeline()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        warnings.filterwarnings("ignore", category=interop.FidelityWarning)
        yield


# -- the cases: masks and score_mods, each built for a device (its captured tensors live there) -------------

DOCS = torch.tensor([[0] * 100 + [1] * 156, [0] * 30 + [1] * 130 + [2] * 96])  # packed sequences per batch row


def causal_softcap(device, bias):
    """Causal mask, tanh soft-cap score_mod, GQA, and the log-sum-exp (with a gradient) returned."""
    def mask_mod(b, h, q, kv):
        return q >= kv

    def score_mod(score, b, h, q, kv):
        return CAP * torch.tanh(score / CAP)

    return mask_mod, score_mod


def document_relative_bias(device, bias):
    """Packed documents (a captured doc-id tensor) and causal; a per-head relative-position bias whose
    captured tensor gets a gradient."""
    docs = DOCS.to(device)

    def mask_mod(b, h, q, kv):
        return (docs[b, q] == docs[b, kv]) & (q >= kv)

    def score_mod(score, b, h, q, kv):
        return score + bias[h] * (q - kv) / L

    return mask_mod, score_mod


def prefix_lm_sliding_window(device, bias):
    """Prefix-LM (a bidirectional prefix) with a causal sliding window after it; no score_mod."""
    def mask_mod(b, h, q, kv):
        return (kv < PREFIX) | ((kv <= q) & (q - kv < WINDOW))

    return mask_mod, None


CASES = {"causal_softcap_gqa_lse": (causal_softcap, True, True),
         "document_relative_bias_gqa": (document_relative_bias, True, False),
         "prefix_lm_sliding_window": (prefix_lm_sliding_window, False, False)}
"""name: (builder, enable_gqa, return the log-sum-exp)."""


def inputs(name: str, device):
    """Seeded q, k, v and a per-head bias for ``name``, as leaves requiring grad on ``device``."""
    _, gqa, _ = CASES[name]
    generator = torch.Generator().manual_seed(sorted(CASES).index(name))
    heads = HKV if gqa else HQ
    shapes = [(B, HQ, L, D), (B, heads, L, D), (B, heads, L, D), (HQ,)]
    return [torch.randn(s, generator=generator).to(device).requires_grad_() for s in shapes]


def attend(fn, name: str, device):
    """One forward (``fn`` is flex_attention or a compiled one) and backward on ``device``; (out, lse or
    None, grads of q, k, v, bias), on the host."""
    build, gqa, lse_wanted = CASES[name]
    q, k, v, bias = inputs(name, device)
    mask_mod, score_mod = build(device, bias)
    block_mask = create_block_mask(mask_mod, B, None, L, L, device=device)
    out, aux = fn(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa,
                  return_aux=AuxRequest(lse=lse_wanted))
    loss = out.sum() + (0.1 * aux.lse.sum() if lse_wanted else 0)
    loss.backward()
    grads = [t.grad for t in (q, k, v, bias)]
    return [None if t is None else t.detach().cpu() for t in (out, aux.lse, *grads)]


@functools.cache
def planned(name: str):
    """The float64 reference: (out, lse, grads of q, k, v, bias) and the mask's computed blocks."""
    build, gqa, lse_wanted = CASES[name]
    q, k, v, bias = [t.detach().double().requires_grad_() for t in inputs(name, "cpu")]
    mask_mod, score_mod = build("cpu", bias)
    out, lse = reference.attention(q, k, v, score_mod, mask_mod, enable_gqa=gqa)
    (out.sum() + (0.1 * lse.sum() if lse_wanted else 0)).backward()
    blocks = reference.computed_blocks(reference.dense_mask(mask_mod, B, 1, L, L))
    grads = [t.grad for t in (q, k, v, bias)]
    return [out.detach(), lse.detach() if lse_wanted else None, *grads], blocks


@functools.cache
def cpu_forward(name: str):
    """torch's own flex_attention on the CPU, without grad (torch refuses the CPU's backward): (out, lse)."""
    build, gqa, lse_wanted = CASES[name]
    q, k, v, bias = [t.detach() for t in inputs(name, "cpu")]
    mask_mod, score_mod = build("cpu", bias)
    block_mask = create_block_mask(mask_mod, B, None, L, L, device="cpu")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out, aux = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa,
                                  return_aux=AuxRequest(lse=lse_wanted))
    return out, aux.lse


def assert_near(got, want, what):
    if want is None:
        assert got is None, what
        return
    error = (got.double() - want).abs().max().item()
    assert error <= REL * want.abs().max().item(), f"{what}: max error {error:.3g} of magnitude {want.abs().max():.3g}"


def flex_records():
    return [r for r in interop.timeline() if "flex" in r.op]


# -- forward and backward on each slot, eager and compiled --------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("kind", sorted(SLOTS))
def test_forward_and_backward_match_plain_attention_with_one_record_each(kind, mode):
    slot = SLOTS[kind]
    # Compiled as torchtitan compiles it (its Inductor options: max-autotune, coordinate descent, no CUDA graphs).
    fn = flex_attention if mode == "eager" else torch.compile(flex_attention, options=TORCHTITAN_OPTIONS)
    prefix = "" if mode == "eager" else "inductor:"
    for name in CASES:
        interop.reset_timeline()
        got = attend(fn, name, f"hybrid:{slot}")
        records = flex_records()
        want, (computed, every) = planned(name)
        lse_wanted = CASES[name][2]

        # The forward is torch's own CPU forward, bit for bit (the same dense math on the same bytes).
        cpu_out, cpu_lse = cpu_forward(name)
        assert torch.equal(got[0], cpu_out), name
        if lse_wanted:
            assert torch.equal(got[1], cpu_lse), name

        cpu = [t.detach() for t in inputs(name, "cpu")]
        mask_mod, score_mod = CASES[name][0]("cpu", cpu[3])
        if score_mod is None:
            # The mask alone: also as torch's fused CPU attention applies it, materialised.
            sdpa = reference.sdpa(*cpu[:3], mask_mod, enable_gqa=CASES[name][1])
            assert_near(got[0], sdpa.double(), f"{name} on {kind} ({mode}): out against SDPA")

        for what, g, w in zip(("out", "lse", "grad q", "grad k", "grad v", "grad bias"), got, want):
            if what == "grad bias" and name != "document_relative_bias_gqa":
                assert g is None, f"{name}: the bias is not used, it gets no gradient"
                continue
            assert_near(g, w, f"{name} on {kind} ({mode}): {what}")

        # Exactly one forward and one backward record, priced as attention over the computed blocks.
        assert [r.op for r in records] == [prefix + "flex_attention", prefix + "flex_attention_backward"], name
        assert {r.slot for r in records} == {slot}
        pairs = computed / every * L * L
        forward, backward = records
        assert forward.flops == pytest.approx(2 * B * HQ * pairs * (D + D)), name
        assert backward.flops == pytest.approx(2 * B * HQ * pairs * (3 * D + 2 * D)), name
        assert f"{computed} of {every} (query block, key block) pairs" in forward.sources[-1]
        assert forward.duration_ps > 0 and backward.duration_ps > forward.duration_ps


def test_a_graph_with_flex_attention_among_other_ops_compiles_whole():
    # Projections (Inductor's extern matmuls) around FlexAttention with an ALiBi-like score_mod, one graph.
    generator = torch.Generator().manual_seed(0)
    x, *weights = (torch.randn(B, HQ, L, D, generator=generator),
                   *(torch.randn(D, D, generator=generator) / 4 for _ in range(4)))
    x, *weights = (t.to("hybrid:0").requires_grad_() for t in (x, *weights))
    block_mask = create_block_mask(lambda b, h, i, j: i >= j, None, None, L, L, device="hybrid:0")

    def layer(x, wq, wk, wv, wo):
        a = flex_attention(x @ wq, x @ wk, x @ wv, block_mask=block_mask,
                           score_mod=lambda s, b, h, i, j: s - (i - j).abs() * 0.01)
        return a @ wo

    def run(fn):
        for t in (x, *weights):
            t.grad = None
        fn(x, *weights).square().mean().backward()
        return [t.grad.cpu() for t in (x, *weights)]

    eager = run(layer)
    interop.reset_timeline()
    compiled = run(torch.compile(layer, fullgraph=True))
    for got, want in zip(compiled, eager):  # the same flex kernel; the matmuls as Inductor calls them
        torch.testing.assert_close(got, want)
    kernels = [r.op for r in interop.timeline() if r.kind == "kernel"]
    assert [k for k in kernels if "flex" in k] == ["inductor:flex_attention", "inductor:flex_attention_backward"]
    assert any("aten::" in k for k in kernels), kernels


def test_the_dense_math_is_drawn_from_the_slot():
    slot = SLOTS["trn3"]
    q, k, v, bias = inputs("prefix_lm_sliding_window", f"hybrid:{slot}")
    mask_mod, _ = prefix_lm_sliding_window(f"hybrid:{slot}", bias)
    block_mask = create_block_mask(mask_mod, B, None, L, L, device=f"hybrid:{slot}")
    torch.hybrid.synchronize()
    torch.hybrid.reset_peak_memory_stats(slot)
    before = torch.hybrid.memory_allocated(slot)
    with torch.no_grad():
        flex_attention(q, k, v, block_mask=block_mask)
    # The float32 score matrix of every (batch, head) is materialised on the host, charged to the slot.
    assert torch.hybrid.max_memory_allocated(slot) - before >= B * HQ * L * L * 4


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_autocast_computes_in_the_autocast_dtype_as_on_cuda(mode):
    # torch casts q, k and v to the autocast dtype (its AutocastCUDA rule); the backward follows the forward.
    q0 = torch.randn(1, 2, 128, D, generator=torch.Generator().manual_seed(3))
    q = q0.to("hybrid:1").requires_grad_()
    fn = flex_attention if mode == "eager" else torch.compile(flex_attention)
    with torch.autocast("hybrid", dtype=torch.bfloat16):
        out = fn(q, q, q)
    out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and q.grad.dtype == torch.float32
    assert [r.dtype for r in flex_records()] == ["bfloat16", "bfloat16"]
    want = flex_attention(*(q0.bfloat16(),) * 3)
    assert torch.equal(out.detach().cpu(), want)


# -- errors ----------------------------------------------------------------------------------------------

def test_tensors_on_two_slots_are_refused_by_name():
    q = torch.randn(1, 2, 128, D, device="hybrid:0")
    other = torch.randn(1, 2, 128, D, device="hybrid:1")
    with pytest.raises(ValueError, match="same device.*hybrid:0.*hybrid:1"):
        flex_attention(q, other, other)
    mask = create_block_mask(lambda b, h, i, j: i >= j, 1, 1, 128, 128, device="hybrid:1")
    with pytest.raises(RuntimeError, match="block_mask to be on the same device.*hybrid:0 and hybrid:1"):
        flex_attention(q, q, q, block_mask=mask)
    bias = torch.randn(2, device="hybrid:1")
    with pytest.raises(Exception, match="hybrid:0 and hybrid:1"):
        flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: s + bias[h])


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_captured_host_tensor_is_refused_by_name(mode):
    # CUDA cannot index a host tensor with device indices either; a 0-dim one (a scalar) rides along.
    q = torch.randn(1, 2, 128, D, device="hybrid:0")
    host_bias = torch.randn(2)
    fn = flex_attention if mode == "eager" else torch.compile(flex_attention)
    with pytest.raises(Exception, match=r"query is on hybrid:0 but a tensor it uses \(\(2,\).*is on cpu"):
        fn(q, q, q, score_mod=lambda s, b, h, i, j: s + host_bias[h])
    if mode == "eager":
        scalar = torch.tensor(0.5)
        out = fn(q, q, q, score_mod=lambda s, b, h, i, j: s * scalar)
        want = reference.attention(q.cpu(), q.cpu(), q.cpu(), lambda s, b, h, i, j: s * 0.5)[0]
        assert_near(out.cpu(), want.double(), "scalar")


def test_the_flash_backend_is_refused_by_name():
    q = torch.randn(1, 2, 128, D, device="hybrid:0")
    with pytest.raises(NotImplementedError, match="BACKEND='FLASH'.*does not run on a slot"):
        flex_attention(q, q, q, kernel_options={"BACKEND": "FLASH"})


# -- transformers and torchtitan ---------------------------------------------------------------------------

def test_transformers_llama_with_flex_attention_matches_sdpa_on_the_cpu():
    import copy

    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(config)
    cpu.set_attn_implementation("sdpa")
    slot = copy.deepcopy(cpu).to("hybrid:1")
    slot.set_attn_implementation("flex_attention")
    ids = torch.randint(0, 128, (2, 64), generator=torch.Generator().manual_seed(1))
    want = cpu(ids, labels=ids).loss
    want.backward()
    interop.reset_timeline()
    got = slot(ids.to("hybrid:1"), labels=ids.to("hybrid:1")).loss
    got.backward()
    # float32 attention by two kernels (SDPA's fused CPU kernel, the dense flex math): re-association only.
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    grads = dict(slot.named_parameters())
    for name, param in cpu.named_parameters():
        torch.testing.assert_close(grads[name].grad.cpu(), param.grad, rtol=1e-4, atol=1e-6, msg=name)
    ops = [r.op for r in interop.timeline() if "flex" in r.op]
    assert ops == ["inductor:flex_attention"] * 2 + ["inductor:flex_attention_backward"] * 2  # two layers


def test_torchtitans_compiled_flex_attention_under_the_cuda_layer(tmp_path):
    # torchtitan's pattern (class-level torch.compile(flex_attention, options=...), a compiled
    # create_block_mask on "cuda" with its causal and document masks composed), run unmodified under the layer.
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")
    script = os.path.join(ROOT, "tests", "support", "cuda_scripts", "flex_torchtitan.py")
    out = tmp_path / "flex.json"
    proc = subprocess.run([sys.executable, "-m", "interop.run", "--rack", RACK, "--map", "h100", script, str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    # create_block_mask(..., device="cuda") built the mask on the slot cuda:0 maps to (the GPU slot).
    assert result["mask_device"] == "hybrid:1" and result["mask_is_cuda"]
    assert result["records"] == ["inductor:flex_attention", "inductor:flex_attention_backward"]
    for what, error in result["errors"].items():
        assert error <= REL, f"{what}: {error:.3g} of its magnitude"
    # Documents of 128, 128 and 64, 64, 128 tokens, causal: 4 of the 8 (query block, key block) pairs.
    assert result["fraction"] == pytest.approx(1 / 2)
    assert result["forward_flops"] == pytest.approx(
        2 * result["batch"] * result["heads"] * result["fraction"] * result["length"] ** 2 * 2 * result["dim"])
