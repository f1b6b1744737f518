"""interop.serve: prefill on one slot, the KV cache copied across the fabric, continuous-batching decode on another.

Tokens are checked against transformers' own greedy generate on the CPU (computed, bit for bit); TTFT and TPOT
(modelled, read from the timeline) against interop.serving_whatif of the same model and workload on the same rack
(its eager engine traces the same batched code on the meta device and prices it op by op)."""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("transformers", reason="serve runs transformers causal LMs")

import torch  # noqa: E402
import transformers  # noqa: E402

import collectives  # noqa: E402
import interop  # noqa: E402
from planner.serving import Engine  # noqa: E402

CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128),
    "qwen2": lambda: transformers.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
}
LENGTHS = (5, 9, 7, 12, 3)


def tiny(family: str):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[family]()).eval()
    model.generation_config.eos_token_id = None  # serve decodes max_new_tokens; so must the reference
    return model


def prompts(lengths=LENGTHS):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]


def reference(model, prompt, new):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen2"])
def test_tokens_equal_cpu_generate_and_whatif_predicts_the_run(family, use_rack):
    rack = use_rack("fusion-default")  # hybrid:0 is a Trn4, hybrid:4 a B200: the contract's defaults
    model = tiny(family)
    ps = prompts()
    result = interop.serve(model, ps, max_new_tokens=6)
    assert result.tokens == [reference(model, p, 6) for p in ps]
    assert result.prefill_slots == (0,) and result.decode_slot == 4
    est = interop.serving_whatif(model.config, rack, workload=result.workload, prefill=dict(slots=[0]),
                                 decode=dict(slots=[4]), precision="float32", engine=Engine.eager())
    assert est.ttft.p50 == pytest.approx(statistics.median(result.ttft), rel=0.05)
    assert est.tpot.p50 == pytest.approx(statistics.median(result.tpot), rel=0.05)


def test_two_prefill_slots_a_batch_limit_and_another_route(use_rack):
    # H100s prefill, a Trn3 decodes: the KV caches cross EFA between the NVLink and NeuronLink domains
    rack = use_rack("trn3:2+h100:2")
    model = tiny("llama")
    ps = prompts()
    interop.reset_timeline()
    result = interop.serve(model, ps, prefill=["hybrid:2", "hybrid:3"], decode="hybrid:0", max_new_tokens=5,
                           max_batch=2)
    assert result.tokens == [reference(model, p, 5) for p in ps]
    # The result hands its run to the what-if: rack, slots, workload, precision, the eager engine with the run's
    # batch limit. The what-if prices the same batched code on the same route, so its median TTFT and TPOT are the
    # timeline's (measured 0.00 %; 0.1 % allowed for the order of float sums).
    config = result.whatif_config()
    assert config["engine"] == interop.Engine.eager(2) == Engine.eager(2) and config["precision"] == "float32"
    assert config["rack"] == rack.spec and config["prefill"] == dict(slots=[2, 3]) and config["decode"] == dict(
        slots=[0])
    est = interop.serving_whatif(model.config, **config)
    assert est.ttft.p50 == pytest.approx(statistics.median(result.ttft), rel=1e-3)
    assert est.tpot.p50 == pytest.approx(statistics.median(result.tpot), rel=1e-3)
    # every estimate names its engine; the default is the fitted production one, another engine
    assert dict(est.rows())["engine"].startswith("eager: interop.serve's engine")
    fitted = interop.serving_whatif(model.config, **{**config, "engine": None})
    assert dict(fitted.rows())["engine"].startswith("fused: the fitted production engine")
    with pytest.raises(ValueError, match="kernels: 'fused', but the engine given runs 'eager' kernels"):
        interop.serving_whatif(model.config, **config, kernels="fused")
    with pytest.raises(ValueError, match="kernels: expected one of 'fused', 'eager', got 'tuned'"):
        interop.serving_whatif(model.config, **{**config, "engine": None}, kernels="tuned")
    # every byte moved is a copy from a prefill slot to the decode slot, priced by the transfer model on its route
    copies = [r for r in interop.timeline() if r.kind == "copy" and r.peer == 0 and r.slot in (2, 3)]
    assert sum(r.bytes for r in copies) == result.kv_bytes_moved > 0
    for r in copies:
        expected = collectives.transfer(rack.spec, r.slot, 0, int(r.bytes))
        assert r.duration == pytest.approx(expected.seconds, abs=1e-12)
        assert expected.fabric == "efa"
    # the first two prompts are prefilled at once, one on each prefill slot (serialised, the second would wait)
    assert result.ttft[1] < 1.5 * result.ttft[0]
    assert est.parallel["prefill"]["instances"] == 2 and all(t > 0 for t in result.tpot)


def test_one_token_needs_no_decode(use_rack):
    use_rack("fusion-default")
    model = tiny("gpt2")
    ps = prompts((4, 6))
    result = interop.serve(model, ps, max_new_tokens=1)
    assert result.tokens == [reference(model, p, 1) for p in ps]
    assert result.kv_bytes_moved == 0 and result.tpot == [0.0, 0.0]


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompts=[]), "prompts: expected a non-empty list"),
    (dict(prompts=[[1, 2], []]), r"prompts\[1\]"),
    (dict(prompts=[[1, 999]]), r"prompts\[0\]: token id 999 is outside the model's vocabulary of 256"),
    (dict(max_new_tokens=0), "max_new_tokens: expected a positive integer"),
    (dict(max_batch=0), "max_batch: expected a positive integer or None"),
    (dict(decode="hybrid:0"), "decode: slot 0 is also a prefill slot"),
    (dict(decode="hybrid:42"), r"decode: slot 42 is not on the current rack \(slots 0-7\)"),
    (dict(prefill="cpu"), "prefill: expected a hybrid device with an index"),
    (dict(prefill=["hybrid:1", "hybrid:1"]), "prefill: slots .* repeat"),
])
def test_bad_inputs_name_the_argument(kwargs, match, use_rack):
    use_rack("fusion-default")
    args = dict(prompts=[[1, 2, 3]], max_new_tokens=2)
    args.update(kwargs)
    model = tiny("gpt2")
    interop.reset_timeline()
    with pytest.raises(ValueError, match=match):
        interop.serve(model, args.pop("prompts"), **args)
    assert not [r for r in interop.timeline() if r.kind == "op"]  # refused before anything ran
