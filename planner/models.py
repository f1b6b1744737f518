"""Models by name: the one registry of the project (torch-free), for what-ifs and for plans.

:data:`MODELS` holds every named model:

* published architectures as transformers configs (``llama3-8b`` ... ``mixtral-8x7b``): a what-if builds them
  on the meta device (:func:`model_blocks`); a plan builds the same config as a module;
* the project's own small modules (``gpt``, ``gpt-tiny``, ``cnn``): :mod:`interop.models` classes that ``hybrid
  plan`` partitions and runs for real; the registry names the class and its configuration, the live side
  (:mod:`interop.live.plan_models`) builds it.

Beside the names, a transformers causal-LM model type (``"llama"``, ``"gpt2"``, ``"mixtral"``) stands for its
default config (:func:`transformers_config`, the one place that looks such a type up). Nothing is downloaded
(``HF_HUB_OFFLINE`` is set for the lookups) and no weight is materialised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from planner.blocks import ModelBlocks

_LLAMA3 = ("Llama Team, 'The Llama 3 Herd of Models' (2024), arXiv:2407.21783, Table 3 "
           "(layers, model dimension, FFN dimension, heads, key/value heads, vocabulary, RoPE base)")
_MIXTRAL = ("Jiang et al., 'Mixtral of Experts' (2024), arXiv:2401.04088, Table 1 "
            "(dim 4096, 32 layers, head dim 128, 32 heads, 8 kv heads, hidden 14336, 8 experts, top 2, "
            "context 32768, vocabulary 32000)")
_OWN = "this project's interop/models.py"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A named model: what it is, where its numbers come from, how it is built and the batch a plan trains."""

    name: str
    description: str
    source: str
    config_class: str | None = None
    """A transformers config class name (``LlamaConfig``): the model is that config's causal LM."""
    module: str | None = None
    """Or ``"package.module:Class"``: a module class of this project, built with ``Class(ConfigClass(**arch))``
    when :attr:`module_config` names its config class, else ``Class()``."""
    module_config: str | None = None
    """The config class beside :attr:`module` (``GPTConfig``)."""
    arch: dict = field(default_factory=dict)
    """The config's keyword arguments: the architecture's numbers."""
    batch: int | None = None
    """Rows of the example batch a plan trains (None: the planner's default)."""
    seq: int | None = None
    """Tokens per row of the example batch (None: the model's, or the planner's default)."""
    dtype: str | None = None
    """The parameters' dtype for a plan (None: as built)."""
    inputs: str = "tokens"
    """``tokens`` (ids, next-token targets) or ``images`` (``1x28x28`` images, class targets)."""

    @property
    def whatif(self) -> bool:
        """A what-if can cut it (a transformers decoder LM)."""
        return self.config_class is not None

    def config(self) -> Any:
        """The transformers config (imports transformers); ValueError for a module of this project."""
        if self.config_class is None:
            raise ValueError(f"model: {self.name!r} is {self.module}, not a transformers config")
        _offline()
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

MODELS: dict[str, ModelEntry] = {m.name: m for m in (
    ModelEntry("llama3-8b", "Llama 3 8B: 32 layers, d 4096, FFN 14336, 32 heads (8 kv)", _LLAMA3, "LlamaConfig",
               arch=_llama(4096, 14336, 32, 32, 8192, _ROPE3)),
    ModelEntry("llama3-70b", "Llama 3 70B: 80 layers, d 8192, FFN 28672, 64 heads (8 kv)", _LLAMA3, "LlamaConfig",
               arch=_llama(8192, 28672, 80, 64, 8192, _ROPE3)),
    ModelEntry("llama3.1-405b", "Llama 3.1 405B: 126 layers, d 16384, FFN 53248, 128 heads (8 kv)", _LLAMA3,
               "LlamaConfig", arch=_llama(16384, 53248, 126, 128, 131072, _ROPE31)),
    ModelEntry("mixtral-8x7b", "Mixtral 8x7B MoE: 32 layers, d 4096, 8 experts of FFN 14336, top-2", _MIXTRAL,
               "MixtralConfig", arch=_MIXTRAL_ARCH),
    ModelEntry("llama3.1-8b", "Llama 3.1 8B: 32 layers, d 4096, FFN 14336, 32 heads (8 kv), vocabulary 128,256",
               f"{_NXD}; {_LLAMA3}", "LlamaConfig", arch=_llama(4096, 14336, 32, 32, 131072, _ROPE31)),
    ModelEntry("llama3.1-70b", "Llama 3.1 70B: 80 layers, d 8192, FFN 28672, 64 heads (8 kv), vocabulary 128,256",
               f"{_NXD}; {_LLAMA3}", "LlamaConfig", arch=_llama(8192, 28672, 80, 64, 131072, _ROPE31)),
    ModelEntry("llama2-7b", "Llama 2 7B: 32 layers, d 4096, FFN 11008, 32 heads (32 kv), vocabulary 32,000", _NXD,
               "LlamaConfig", arch=_llama(4096, 11008, 32, 32, 4096, _ROPE2, kv=32, vocab=32000)),
    ModelEntry("llama2-13b", "Llama 2 13B: 40 layers, d 5120, FFN 13824, 40 heads (40 kv), vocabulary 32,016",
               _NXD, "LlamaConfig", arch=_llama(5120, 13824, 40, 40, 4096, _ROPE2, kv=40, vocab=32016)),
    ModelEntry("llama2-70b", "Llama 2 70B: 80 layers, d 8192, FFN 28672, 64 heads (8 kv), vocabulary 32,000", _NXD,
               "LlamaConfig", arch=_llama(8192, 28672, 80, 64, 4096, _ROPE2, kv=8, vocab=32000)),
    ModelEntry("gpt", "GPT-style decoder, 2048 wide, 8 layers, 1024 tokens, bfloat16, batch 64 (the planner's demo)",
               _OWN, module="interop.models:GPT", module_config="GPTConfig",
               arch=dict(vocab_size=32768, seq_len=1024, dim=2048, heads=16, layers=8), batch=64, seq=1024,
               dtype="bfloat16"),
    ModelEntry("gpt-tiny", "the small GPT of `hybrid demo` (128 wide, 2 layers, 64 tokens), float32, batch 8", _OWN,
               module="interop.models:GPT", module_config="GPTConfig", arch=dict(seq_len=64), batch=8, seq=64,
               dtype="float32"),
    ModelEntry("cnn", "a LeNet-sized CNN on 1x28x28 inputs, float32, batch 32", _OWN, module="interop.models:SmallCNN",
               batch=32, dtype="float32", inputs="images"),
)}
"""Every named model (see the module doc)."""


def model_names(*, whatif: bool = False) -> list[str]:
    """The registry's names (``whatif=True``: those a what-if can cut)."""
    return [name for name, entry in MODELS.items() if entry.whatif or not whatif]


def model_presets() -> dict[str, str]:
    """The what-if's named models: name -> one-line description."""
    return {name: entry.description for name, entry in MODELS.items() if entry.whatif}


def lookup(name: str) -> ModelEntry | None:
    """The entry called ``name`` (case-insensitive), or None."""
    return MODELS.get(name.strip().lower()) if isinstance(name, str) else None


def _offline() -> None:
    # A config name must never reach the network: models are built from configs, never downloaded.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _hf_model_types() -> list[str]:
    _offline()
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def unknown_model_message(name: object) -> str:
    """The error text for a model name the registry does not know and transformers has no causal LM for."""
    return (f"model: unknown model {name!r}; named models: {', '.join(MODELS)}; or a transformers causal-LM "
            f"model type (its default config, e.g. 'llama', 'gpt2', 'mixtral'), a transformers config, or an "
            f"nn.Module built on the meta device")


def transformers_config(name: str) -> Any:
    """The config of a named transformers model, or a transformers causal-LM model type's default config;
    ValueError (:func:`unknown_model_message`) for anything else."""
    entry = lookup(name)
    if entry is not None and entry.whatif:
        return entry.config()
    key = name.strip().lower() if isinstance(name, str) else name
    _offline()
    from transformers import CONFIG_MAPPING

    if key in CONFIG_MAPPING and key in set(_hf_model_types()):
        try:
            return CONFIG_MAPPING[key]()
        except Exception as e:  # transformers' own validation of its default (e.g. a draft model's config)
            raise ValueError(f"model: transformers cannot build its default {key!r} config ({type(e).__name__}: "
                             f"{' '.join(str(e).split())}); give a transformers config with its values") from None
    raise ValueError(unknown_model_message(name))


@lru_cache(maxsize=32)
def _blocks_for_name(name: str, dtype: str = "bfloat16", kernels: str = "fused") -> ModelBlocks:
    from planner.decoder_blocks import DecoderBlocks

    entry = lookup(name)
    if entry is not None and entry.whatif:
        _offline()
        return DecoderBlocks(name=entry.name, source=entry.source, arch=entry.arch, config_class=entry.config_class,
                             dtype=dtype, kernels=kernels)
    if entry is not None:
        raise ValueError(f"model: {entry.name!r} ({entry.module}) is one of the models `hybrid plan` runs for real; a "
                         f"what-if cuts a transformers decoder LM: {', '.join(model_names(whatif=True))}, or a "
                         f"transformers causal-LM model type")
    config = transformers_config(name)
    key = name.strip().lower()
    return DecoderBlocks(config, name=key, source=f"transformers {key} default config ({type(config).__name__})",
                         dtype=dtype, kernels=kernels)


def model_blocks(model: Any, *, dtype: str = "bfloat16", kernels: str = "fused") -> ModelBlocks:
    """:class:`ModelBlocks` for a named model, a transformers model type, a config or a meta-device module, traced
    in ``dtype`` with ``kernels`` (:mod:`planner.kernels`; ModelBlocks given as they are)."""
    from planner.kernels import check_kernels

    check_kernels(kernels)
    if isinstance(model, ModelBlocks):
        return model
    if isinstance(model, str):
        return _blocks_for_name(model, dtype, kernels)
    from planner.decoder_blocks import DecoderBlocks

    if hasattr(model, "to_dict") and hasattr(model, "model_type"):
        return DecoderBlocks(model, name=getattr(model, "model_type", None) or type(model).__name__,
                             source=f"transformers config {type(model).__name__}", dtype=dtype, kernels=kernels)
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
                             f"its config, or a named model ({', '.join(model_names(whatif=True))})")
        return DecoderBlocks(config, name=type(model).__name__, model=model, dtype=dtype, kernels=kernels,
                             source=f"module {type(model).__name__} on the meta device")
    raise ValueError(unknown_model_message(model))


__all__ = ["MODELS", "ModelEntry", "lookup", "model_blocks", "model_names", "model_presets", "transformers_config",
           "unknown_model_message"]
