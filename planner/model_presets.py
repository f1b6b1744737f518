"""Named models for what-ifs: published architectures as transformers configs, built on the meta device.

:func:`model_presets` lists them; :func:`model_blocks` turns a preset name, a
transformers model type (``"llama"``, ``"gpt2"``, ``"mixtral"``: its default
config), a ``PretrainedConfig`` or a module built on the meta device into
:class:`~planner.decoder_blocks.DecoderBlocks`. Nothing is downloaded
(``HF_HUB_OFFLINE`` is set for the lookups) and no weight is materialised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from planner.blocks import ModelBlocks

_LLAMA3 = ("Llama Team, 'The Llama 3 Herd of Models' (2024), arXiv:2407.21783, Table 3 "
           "(layers, model dimension, FFN dimension, heads, key/value heads, vocabulary, RoPE base)")
_MIXTRAL = ("Jiang et al., 'Mixtral of Experts' (2024), arXiv:2401.04088, Table 1 "
            "(dim 4096, 32 layers, head dim 128, 32 heads, 8 kv heads, hidden 14336, 8 experts, top 2, "
            "context 32768, vocabulary 32000)")


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A named architecture: its transformers config class and arguments, and where the figures come from."""

    name: str
    description: str
    source: str
    config_class: str
    """A transformers config class name (``LlamaConfig``)."""
    arch: dict
    """Its keyword arguments: the architecture's numbers."""

    def config(self) -> Any:
        """The transformers config (imports transformers)."""
        import transformers

        return getattr(transformers, self.config_class)(**self.arch)


def _llama(hidden: int, ffn: int, layers: int, heads: int, context: int, rope: dict, *, kv: int = 8,
           vocab: int = 128256) -> dict:
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=context,
                rms_norm_eps=1e-5, rope_parameters=rope, tie_word_embeddings=False)


_MIXTRAL_ARCH = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2,
                     max_position_embeddings=32768, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                     tie_word_embeddings=False)


_NXD = ("AWS NeuronX Distributed training examples, examples/training/llama/*/config.json "
        "(aws-neuron/neuronx-distributed @fbac349b): SwiGLU, RMSNorm 1e-5, untied embeddings; the models of AWS's "
        "Trn1 training performance tables")
_ROPE2 = {"rope_type": "default", "rope_theta": 10000.0}
_ROPE3 = {"rope_type": "default", "rope_theta": 500000.0}
_ROPE31 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

_PRESETS: dict[str, ModelPreset] = {p.name: p for p in (
    ModelPreset("llama3-8b", "Llama 3 8B: 32 layers, d 4096, FFN 14336, 32 heads (8 kv)", _LLAMA3,
                "LlamaConfig", _llama(4096, 14336, 32, 32, 8192, _ROPE3)),
    ModelPreset("llama3-70b", "Llama 3 70B: 80 layers, d 8192, FFN 28672, 64 heads (8 kv)", _LLAMA3,
                "LlamaConfig", _llama(8192, 28672, 80, 64, 8192, _ROPE3)),
    ModelPreset("llama3.1-405b", "Llama 3.1 405B: 126 layers, d 16384, FFN 53248, 128 heads (8 kv)", _LLAMA3,
                "LlamaConfig", _llama(16384, 53248, 126, 128, 131072, _ROPE31)),
    ModelPreset("mixtral-8x7b", "Mixtral 8x7B MoE: 32 layers, d 4096, 8 experts of FFN 14336, top-2", _MIXTRAL,
                "MixtralConfig", _MIXTRAL_ARCH),
    ModelPreset("llama3.1-8b", "Llama 3.1 8B: 32 layers, d 4096, FFN 14336, 32 heads (8 kv), vocabulary 128,256",
                f"{_NXD}; {_LLAMA3}", "LlamaConfig", _llama(4096, 14336, 32, 32, 131072, _ROPE31)),
    ModelPreset("llama3.1-70b", "Llama 3.1 70B: 80 layers, d 8192, FFN 28672, 64 heads (8 kv), vocabulary 128,256",
                f"{_NXD}; {_LLAMA3}", "LlamaConfig", _llama(8192, 28672, 80, 64, 131072, _ROPE31)),
    ModelPreset("llama2-7b", "Llama 2 7B: 32 layers, d 4096, FFN 11008, 32 heads (32 kv), vocabulary 32,000", _NXD,
                "LlamaConfig", _llama(4096, 11008, 32, 32, 4096, _ROPE2, kv=32, vocab=32000)),
    ModelPreset("llama2-13b", "Llama 2 13B: 40 layers, d 5120, FFN 13824, 40 heads (40 kv), vocabulary 32,016",
                _NXD, "LlamaConfig", _llama(5120, 13824, 40, 40, 4096, _ROPE2, kv=40, vocab=32016)),
    ModelPreset("llama2-70b", "Llama 2 70B: 80 layers, d 8192, FFN 28672, 64 heads (8 kv), vocabulary 32,000", _NXD,
                "LlamaConfig", _llama(8192, 28672, 80, 64, 4096, _ROPE2, kv=8, vocab=32000)),
)}


def model_presets() -> dict[str, str]:
    """Preset name -> one-line description."""
    return {name: p.description for name, p in _PRESETS.items()}


def _hf_model_types() -> list[str]:
    _offline()
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _offline() -> None:
    # A config name must never reach the network: what-ifs build configs, never download them.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def unknown_model_message(name: object) -> str:
    """The error text for a model name that is neither a preset nor a transformers causal-LM type."""
    presets = ", ".join(_PRESETS)
    return (f"model: unknown model {name!r}; presets: {presets}; or a transformers causal-LM model type "
            f"(its default config, e.g. 'llama', 'gpt2', 'mixtral'), a transformers config, or an nn.Module "
            f"built on the meta device")


@lru_cache(maxsize=32)
def _blocks_for_name(name: str) -> ModelBlocks:
    from planner.decoder_blocks import DecoderBlocks

    key = name.strip().lower()
    preset = _PRESETS.get(key)
    if preset is not None:
        _offline()
        return DecoderBlocks(name=preset.name, source=preset.source, arch=preset.arch,
                             config_class=preset.config_class)
    _offline()
    from transformers import CONFIG_MAPPING

    if key in CONFIG_MAPPING and key in set(_hf_model_types()):
        config = CONFIG_MAPPING[key]()
        return DecoderBlocks(config, name=key, source=f"transformers {key} default config ({type(config).__name__})")
    raise ValueError(unknown_model_message(name))


def model_blocks(model: Any) -> ModelBlocks:
    """:class:`ModelBlocks` for a preset name, a transformers model type, a config or a meta-device module."""
    if isinstance(model, ModelBlocks):
        return model
    if isinstance(model, str):
        return _blocks_for_name(model)
    from planner.decoder_blocks import DecoderBlocks

    if hasattr(model, "to_dict") and hasattr(model, "model_type"):
        return DecoderBlocks(model, name=getattr(model, "model_type", None) or type(model).__name__,
                             source=f"transformers config {type(model).__name__}")
    import torch

    if isinstance(model, torch.nn.Module):
        tensors = list(model.parameters()) + list(model.buffers())
        real = [t for t in tensors if t.device.type != "meta"]
        if real:
            raise ValueError(f"model: what-ifs are shape-only; build the module on the meta device "
                             f"(with torch.device('meta'): ...) -- {type(model).__name__} has {len(real)} "
                             f"tensors on {real[0].device}")
        config = getattr(model, "config", None)
        if config is None or not hasattr(config, "num_hidden_layers"):
            raise ValueError(f"model: {type(model).__name__} is not a transformers causal LM; what-ifs cut a "
                             f"decoder LM (embedding, layers, head) -- pass a transformers model built on meta, "
                             f"its config, or a preset ({', '.join(_PRESETS)})")
        return DecoderBlocks(config, name=type(model).__name__, model=model,
                             source=f"module {type(model).__name__} on the meta device")
    raise ValueError(unknown_model_message(model))


__all__ = ["ModelPreset", "model_blocks", "model_presets", "unknown_model_message"]
