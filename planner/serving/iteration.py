"""The modelled time of one engine iteration on one instance, from the per-op cost model and the collectives.

An iteration of a fused engine runs, per layer and chip: an RMS norm, the QKV GEMM,
rotary embedding with the KV cache write, attention (prefill chunks against their
prefix, decode tokens against the paged cache: one kernel reading every cached token
of the batch), the output projection, the tensor-parallel all-reduce, a norm, the
MLP (or the router, the all-gather of the ranks' tokens, the experts' grouped GEMMs and the
reduce-scatter of their outputs),
and the second all-reduce; then the LM head on the sequences that sample, and the
argmax. Every kernel is priced by ``devices.estimate`` on the kind (GEMMs in the
serving precision, with its bytes per element), every collective by
``collectives.estimate`` on the rack's topology (:class:`planner.comm.CommPricer`),
and the serving efficiencies of :mod:`planner.serving.fitted` apply (GEMMs' compute term, every kernel's
memory term, attention, a time per iteration, and for a mixture of experts the fused MoE layer's rate on the experts'
FP4 grouped GEMMs and the weight passes each routed decode token adds to them:
:meth:`FusedCost.expert_decode_seconds`). The routed experts' GEMMs are one grouped-GEMM kernel: one launch, one
stream of every local expert's weights.

Multi-head latent attention (:class:`~planner.serving.model_shape.LatentAttention`) runs its projections as the
layer's GEMMs (the latents' norms, the rotary parts and the latent's cache write beside them) and attends as
:meth:`ModelShape.attention_shapes` gives: at decode over the latent, its bytes the cache's; at prefill over the
expanded heads. ``kv_b_proj`` is one GEMM over every token: at prefill the latents' expansion, at decode the absorbed
per-head products with the same weights and FLOPs (a chunked prompt's re-expansion of its cached prefix is not priced).

A layer is priced as the model's average layer: where layers differ (an MoE model's dense and sparse layers,
full and local attention), each piece counts for the share of the layers that hold it, and a local-attention
layer's attention sees only its span (:meth:`ModelShape.local_pairs` at prefill; at decode the keys the
simulation keeps, :class:`planner.serving.local_keys.LocalKeys`).

With ``ep`` ranks, attention is data parallel (each rank runs its own sequences, under its own batch
and token limits: :func:`planner.serving.run.simulate`) and the experts are divided over the ranks; with ``pp`` stages the batch is split into ``pp``
microbatches in flight, so one token of every sequence takes ``pp`` stage times.

A prompt is one rank's: with attention data parallel, an iteration's prompts (or chunks) go to the ranks whole, the
largest first to the least loaded rank (TensorRT-LLM's baseline sorts context requests by tokens and deals them out),
its decode tokens evenly. Every layer then waits for its busiest rank before the experts' exchange: the layer's
attention and dense GEMMs take the busiest rank's time, the experts the instance's tokens divided over the ranks.
An iteration where one rank prefills while the others decode costs the whole prefill (TensorRT-LLM tech blog 10,
"ADP Balance Strategy": iteration time is the slowest rank's; without its balancing, 1.31-1.33x lower throughput
on 8 GB200 for DeepSeek V3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import devices
import devices.cost
from planner.comm import CommPricer
from planner.serving.experts import ExpertPricing
from planner.serving.fitted import ServingEfficiency, serving_efficiency
from planner.serving.grid import Grid, Grid2
from planner.serving.parts import PARTS, add as _add, bound
from planner.serving.model_shape import ModelShape, ceil_div
from planner.serving.precision import Precision

@dataclass(frozen=True, slots=True)
class Placement:
    """An instance's chips: ``tp x ep x pp`` slots from ``first``, tensor-parallel ranks adjacent."""

    slots: Sequence[int]
    tp: int
    ep: int
    pp: int

    def tp_group(self) -> Sequence[int]:
        return self.slots[: self.tp]

    def ep_group(self) -> Sequence[int]:
        return self.slots[: self.tp * self.ep: self.tp]

    def stage_first(self, stage: int) -> int:
        return self.slots[stage * self.tp * self.ep]


class FusedCost(ExpertPricing):
    """Seconds of one iteration of the fused engine on one instance (see the module doc)."""

    def __init__(self, shape: ModelShape, kind: str, precision: Precision, placement: Placement,
                 pricer: CommPricer, efficiency: ServingEfficiency | None = None, calibrated: bool = True,
                 local_cache: bool = False, static_decode: tuple[int, int] | None = None,
                 nxd_inference: bool = False, host_per_token: float = 0.0) -> None:
        self.shape, self.kind, self.precision, self.placement, self.pricer = shape, kind, precision, placement, pricer
        self.host_per_token = host_per_token
        """Seconds of the serving frontend's host work per sampled token, overlapped with the kernels
        (:attr:`planner.serving.engine.Engine.host_per_token`): an iteration takes at least this times its sampled
        tokens."""
        self.static_decode = static_decode
        """(compiled batch, compiled sequence length) of a static-shape token-generation graph
        (:attr:`planner.serving.engine.Engine.static_decode`): every decode step is priced at that batch over that
        many cached tokens a line; None: the running sequences over their caches."""
        self.nxd_inference = nxd_inference
        """The routed experts run NxD's ``ExpertMLPs`` (:attr:`planner.serving.engine.Engine.nxd_inference`)."""
        self.tp, self.ep, self.pp = placement.tp, placement.ep, placement.pp
        self.efficiency = (efficiency or serving_efficiency(kind)) if calibrated else None
        self.stage_layers = ceil_div(shape.layers, self.pp)
        self._factor = {name: (self._fig(name).value if self._fig(name) is not None else 1.0)
                        for name in ("memory", "attention")}
        # The routed experts' GEMMs take the factors of the precision their MMA runs in (a mixed checkpoint's
        # experts apart from its dense GEMMs: planner.serving.precision).
        for key, prec in (("gemm", precision), ("expert_mma", precision.expert_gemms)):
            gemm = self.efficiency.gemm_factor(prec.name) if self.efficiency is not None else None
            self._factor[key] = gemm.value if gemm is not None else 1.0
        experts = (self.efficiency.expert_gemm_factor(precision.expert_gemms.name) if self.efficiency is not None
                   else None)
        self._factor["expert_gemm"] = experts.value if experts is not None else 1.0
        self._iteration = self._fig("iteration").value if self._fig("iteration") is not None else 0.0
        restream = self._fig("expert_decode") if shape.experts else None
        self._expert_decode = (restream.value * self._expert_weight_seconds() * shape.moe_layers / shape.layers
                               if restream is not None else 0.0)
        self._local_share = shape.local_layers / shape.layers
        # TensorRT-LLM applies chunked attention to context requests only (Engine.local_cache): decode keys are whole
        decode_local = shape.local_layers and (local_cache or shape.local != "chunked")
        self.local = (shape.local, shape.span) if decode_local else None
        """(kind, span) of the local-attention layers whose decode tokens see only the span, for the simulation's
        :class:`LocalKeys` (None: every decode token sees its whole cache)."""
        self.prefill_local = bool(shape.local_layers)
        """Prompt tokens of local-attention layers attend within the span (every engine)."""
        self.projected = devices.chip(kind).projected
        self._dense = Grid(lambda t: sum(self._dense_parts(t).values()))
        self._moe = Grid(lambda t: sum(self._expert_parts(t).values()))
        self._moe_generation = Grid(lambda t: sum(self._expert_parts(t, generation=True).values()))
        self._decode_attention = Grid(lambda n: sum(self._decode_attention_parts(n).values()))
        self._prefill_attention = Grid2(lambda q, k: sum(self._prefill_attention_parts(q, k).values()))
        self._head = Grid(lambda n: sum(self._head_parts(n).values()))
        self._edges = Grid(lambda t: sum(self._edge_parts(t).values()))

    def _fig(self, name: str):
        return getattr(self.efficiency, name, None) if self.efficiency is not None else None

    def figures(self) -> tuple:
        """The fitted serving figures this cost applies."""
        if self.efficiency is None:
            return ()
        routed = self.precision.expert_gemms
        gemms = {self.efficiency.gemm_factor(self.precision.name)}
        if self.shape.experts:
            gemms.add(self.efficiency.gemm_factor(routed.name))
        experts = self.efficiency.expert_gemm_factor(routed.name) if self.shape.experts else None
        return tuple(f for name, f in self.efficiency.figures().items()
                     if (not name.startswith("gemm") or f in gemms) and (name != "expert_decode" or self.shape.experts)
                     and (not name.startswith("expert_gemm") or f is experts))

    # -- priced pieces, each as {part: seconds} ------------------------------------------

    def _op(self, parts: dict, op: str, shapes, dtype: str, compute_factor: float = 1.0,
            memory_factor: float | None = None, *, true_bytes: float | None = None, args=None) -> None:
        """One kernel: the cost model's roofline (``max(compute, memory) + launch``), each term times its serving
        factor (the memory term of every kernel but attention times the ``memory`` factor)."""
        e = devices.estimate(self.kind, op, shapes, dtype, args=args)
        memory = e.memory_seconds * (true_bytes / e.bytes if true_bytes is not None and e.bytes else 1.0)
        memory *= self._factor["memory"] if memory_factor is None else memory_factor
        compute = e.compute_seconds * compute_factor
        parts["compute" if compute >= memory else "memory"] += max(compute, memory)
        parts["overhead"] += e.overhead_seconds

    def _gemm(self, parts: dict, m: int, k: int, n: int, times: int = 1, quantized: bool = True,
              grouped: bool = False) -> None:
        """``times`` (m, k) x (k, n) GEMMs; ``grouped``: one grouped-GEMM kernel runs them all (the routed experts,
        as serving engines run them, in :attr:`Precision.expert_gemms`), so the launch is paid once, not per
        expert."""
        if m <= 0 or times <= 0:
            return
        p = self.precision.expert_gemms if grouped else self.precision
        dtype = p.gemm_dtype if quantized else ("float32" if p.name == "float32" else "bfloat16")
        wb, ib = (p.weight_bytes, p.input_bytes) if quantized else (p.activation_bytes, p.activation_bytes)
        # The cost model counts bytes at the dtype's item size; a quantized GEMM moves weights and
        # activations at the precision's bytes per element (block scales included) and writes 16 bits.
        true = m * k * ib + k * n * wb + m * n * p.activation_bytes
        if grouped:
            self._grouped_gemm(parts, m, k, n, times, dtype, true)
            return
        sub: dict = dict.fromkeys(PARTS, 0.0)
        self._op(sub, "aten::mm", [(m, k), (k, n)], dtype, self._factor["gemm"], true_bytes=true)
        for key in PARTS:
            parts[key] += sub[key] * times

    def _grouped_gemm(self, parts: dict, m: int, k: int, n: int, times: int, dtype: str, true: float) -> None:
        """One grouped-GEMM kernel of ``times`` (m, k) x (k, n) GEMMs moving ``true`` bytes each: its compute is
        each GEMM's at its own shape (the tiles are per expert) times the fused MoE layer's factor
        (:attr:`ServingEfficiency.expert_gemm_fp4`); its memory one stream of every GEMM's bytes, so the kernel's
        memory latency (what keeps a small transfer below the HBM bandwidth) and its launch are paid once, not once
        per expert."""
        e = devices.estimate(self.kind, "aten::mm", [(m, k), (k, n)], dtype)
        whole = devices.cost.estimate_kernel(self.kind, dtype, bytes=e.bytes * times)
        memory = whole.memory_seconds * (true / e.bytes if e.bytes else 1.0) * self._factor["memory"]
        compute = e.compute_seconds * self._factor["expert_mma"] * self._factor["expert_gemm"] * times
        parts["compute" if compute >= memory else "memory"] += max(compute, memory)
        parts["overhead"] += e.overhead_seconds

    def _pointwise(self, parts: dict, op: str, shapes) -> None:
        self._op(parts, op, shapes, self._act_dtype())

    def _act_dtype(self) -> str:
        return "float32" if self.precision.name == "float32" else "bfloat16"

    def _layer_parts(self, tokens: int, generation: bool = False) -> dict:
        """The model's average layer on one chip for ``tokens`` tokens of its rank, attention excluded
        (``generation``: decode tokens only)."""
        parts = self._dense_parts(tokens)
        _add(parts, self._expert_parts(tokens, generation), 1.0)
        return parts

    def _dense_parts(self, tokens: int) -> dict:
        """The model's average layer on one chip for ``tokens`` tokens of its rank, attention and the experts
        excluded (a piece only some layers hold counts for their share)."""
        s, tp = self.shape, self.tp
        parts = dict.fromkeys(PARTS, 0.0)
        h = s.hidden
        self._pointwise(parts, "aten::rms_norm", [(tokens, h), (h,)])
        for g in s.gemms:
            if g.experts:
                continue
            piece = dict.fromkeys(PARTS, 0.0)
            k, n = g.local(tp)
            self._gemm(piece, tokens, k, n)
            if g.name == "qkv":
                qk = (s.heads // tp + s.kv_heads_per_chip(tp)) * s.head_dim
                self._pointwise(piece, "aten::mul", [(tokens, qk), (tokens, qk)])  # rotary embedding
                kv = 2 * s.kv_heads_per_chip(tp) * s.head_dim
                self._op(piece, "aten::copy_", [(tokens, kv), (tokens, kv)], self.precision.kv_dtype)  # cache write
            if g.name == "kv_a_proj_with_mqa":
                self._latent_pointwise(piece, tokens)
            if g.name in ("gate_up", "up", "shared.gate_up"):
                width = n // 2 if g.name.endswith("gate_up") else n
                self._pointwise(piece, "aten::mul", [(tokens, width), (tokens, width)])  # activation
            _add(parts, piece, s.share(g))
        self._pointwise(parts, "aten::rms_norm", [(tokens, h), (h,)])
        act = self.precision.activation_bytes
        if tp > 1:
            parts["communication"] += 2 * self.pricer.seconds("all_reduce", tokens * h * act,
                                                              self.placement.tp_group())
        return parts

    def _latent_pointwise(self, parts: dict, tokens: int) -> None:
        """Latent attention's elementwise kernels beside its projections: the latents' norms, the rotary embedding
        of the queries' and the shared key's rotary parts, and the cache write of the latent (whole on every
        rank)."""
        s, lat = self.shape, self.shape.latent
        for width in (lat.q_rank, lat.kv_rank):
            if width:
                self._pointwise(parts, "aten::rms_norm", [(tokens, width), (width,)])
        rope = (s.heads // self.tp + 1) * lat.rope
        self._pointwise(parts, "aten::mul", [(tokens, rope), (tokens, rope)])
        self._op(parts, "aten::copy_", [(tokens, lat.cache), (tokens, lat.cache)], self.precision.kv_dtype)

    def _decode_attention_parts(self, kv_tokens: int) -> dict:
        """Attention of decode tokens over ``kv_tokens`` cached tokens (summed over the rank's sequences):
        one kernel reading them all, priced as one query against them (the read dominates). Latent attention's
        keys and values are one latent: its bytes are the cache's, read once (:meth:`decode_bytes`)."""
        s = self.shape
        parts = dict.fromkeys(PARTS, 0.0)
        shapes = s.attention_shapes(self.tp, 1, kv_tokens, decode=True)
        true = self.decode_bytes(kv_tokens) if s.latent is not None else None
        self._op(parts, "aten::_scaled_dot_product_flash_attention", shapes, self.precision.kv_dtype,
                 self._factor["attention"], self._factor["attention"], true_bytes=true)
        return parts

    def decode_bytes(self, kv_tokens: int) -> float:
        """Bytes the decode attention kernel moves on one chip for ``kv_tokens`` cached tokens and one query: the
        cache (:meth:`ModelShape.kv_layer_elements` a token), the query and the output, in the cache's dtype."""
        s = self.shape
        q, _, v = s.attention_shapes(self.tp, 1, kv_tokens, decode=True)
        out = q[1] * v[3]
        return (kv_tokens * s.kv_layer_elements(self.tp) + q[1] * q[3] + out) * self.precision.kv_bytes

    def _prefill_attention_parts(self, queries: int, keys: int) -> dict:
        """Attention of ``queries`` prompt tokens, each against ``keys`` keys on average (latent attention: the
        latents expanded into every head by ``kv_b_proj``, a GEMM of the layer)."""
        parts = dict.fromkeys(PARTS, 0.0)
        self._op(parts, "aten::_scaled_dot_product_flash_attention",
                 self.shape.attention_shapes(self.tp, queries, keys, decode=False), self.precision.kv_dtype,
                 self._factor["attention"], self._factor["attention"])
        return parts

    def _head_parts(self, sequences: int) -> dict:
        """The LM head and greedy sampling for ``sequences`` sequences (last stage)."""
        s, tp = self.shape, self.tp
        parts = dict.fromkeys(PARTS, 0.0)
        self._pointwise(parts, "aten::rms_norm", [(sequences, s.hidden), (s.hidden,)])
        self._gemm(parts, sequences, s.hidden, s.vocab // tp, quantized=False)
        self._op(parts, "aten::argmax", [(sequences, s.vocab // tp)], "float32")
        if tp > 1:
            parts["communication"] += self.pricer.seconds("all_gather", sequences * 8 * tp, self.placement.tp_group())
        return parts

    def _edge_parts(self, tokens: int) -> dict:
        """The embedding lookup, and the pipeline sends of ``tokens`` activations between stages."""
        s = self.shape
        parts = dict.fromkeys(PARTS, 0.0)
        self._op(parts, "aten::embedding", [(s.vocab // self.tp, s.hidden), (tokens,)], self._act_dtype())
        if self.pp > 1:
            nbytes = tokens * s.hidden * self.precision.activation_bytes
            for stage in range(self.pp - 1):
                parts["communication"] += self.pricer.send(nbytes, self.placement.stage_first(stage),
                                                           self.placement.stage_first(stage + 1))
        return parts

    # -- one iteration ---------------------------------------------------------------------

    def seconds(self, prefill_tokens: int, prefill_pairs: float, decode_seqs: int, decode_kv: int,
                sampled: int, local_pairs: float | None = None, local_kv: float | None = None,
                busiest: tuple[int, float, float | None] | None = None) -> float:
        """One iteration: ``prefill_tokens`` prompt tokens whose attention covers ``prefill_pairs``
        (query, key) pairs, ``decode_seqs`` decode tokens reading ``decode_kv`` cached tokens in all, and
        ``sampled`` sequences sampling a token; in a local-attention layer ``local_pairs`` and ``local_kv``
        instead (None: as a full layer); ``busiest``: the (prompt tokens, pairs, local pairs) of the rank holding the
        most (None: spread evenly over the ranks, see the module doc)."""
        ep, pp = self.ep, self.pp
        decode_seqs, decode_kv, local_kv = self._compiled(decode_seqs, decode_kv, local_kv)
        tokens = prefill_tokens + decode_seqs
        if tokens <= 0:
            return 0.0
        if busiest is None:
            q, pairs = prefill_tokens / ep, prefill_pairs / ep
            lpairs = None if local_pairs is None else local_pairs / ep
        else:
            q, pairs, lpairs = busiest
        layer = self._tokens_layer(q, decode_seqs, tokens)
        local = self._local_share
        if decode_kv:  # as decode_pricer's prices
            kv = decode_kv if local_kv is None else local_kv
            layer += (1 - local) * self._decode_attention(decode_kv / (ep * pp))
            if local and kv:
                layer += local * self._decode_attention(kv / (ep * pp))
        if q:
            layer += (1 - local) * self._prefill_attention(q / pp, pairs / q)
            if local:
                layer += local * self._prefill_attention(q / pp, (pairs if lpairs is None else lpairs) / q)
        stage = self.stage_layers * layer
        kernels = pp * stage + self._head(sampled / ep) + self._edges(tokens / ep) + self._iteration
        return max(kernels, self.host_per_token * sampled)

    def _tokens_layer(self, q: float, decode_seqs: int, tokens: int) -> float:
        """The average layer's seconds outside attention for ``q`` prompt tokens of the busiest rank and the
        iteration's ``decode_seqs`` decode and ``tokens`` tokens in all."""
        ep, pp = self.ep, self.pp
        moe = self._moe_generation if not q and self.nxd_inference else self._moe
        return (self._dense((q + decode_seqs / ep) / pp) + moe(tokens / (ep * pp))
                + self.expert_decode_seconds(decode_seqs / (ep * pp)))

    def _compiled(self, decode_seqs: int, decode_kv: float, local_kv: float | None) -> tuple:
        """``(decode_seqs, decode_kv, local_kv)`` as the iteration runs them: unchanged, or with a static-shape
        token-generation graph (:attr:`static_decode`) the compiled batch over its compiled length a line (a local
        layer's keys priced as a full layer's: the graph's cache is whole)."""
        if self.static_decode is None or not decode_seqs:
            return decode_seqs, decode_kv, local_kv
        batch, length = self.static_decode
        return batch, batch * length, None

    def decode_pricer(self, batch: int):
        """``prices(kv_tokens, local_kv=None)``: :meth:`decode` of ``batch`` sequences (equally :meth:`mixed` with no
        chunks) for each of ``kv_tokens`` (a numpy integer array of increasing cache sizes; ``local_kv`` one of the
        keys in a local layer), as a list, bit for bit: what depends on ``batch`` alone priced once, then
        :meth:`seconds`' operations element-wise (for the simulation's runs of decode iterations where only the
        cache grows: :meth:`planner.serving.simulation.Simulation.run`)."""
        import numpy as np

        ep, pp, stage_layers, iteration = self.ep, self.pp, self.stage_layers, self._iteration
        floor = self.host_per_token * batch
        if self.static_decode is not None:  # every step the same compiled shapes
            price = self.seconds(0, 0.0, batch, 1, batch)

            def static_prices(kv_tokens, local_kv=None) -> list[float]:
                if not len(kv_tokens) or kv_tokens[0] <= 0:
                    raise ValueError(f"kv_tokens: expected increasing positive cache sizes, got {kv_tokens!r}")
                return [price] * len(kv_tokens)

            return static_prices
        base = self._tokens_layer(0.0, batch, batch)
        head, edges = self._head(batch / ep), self._edges(batch / ep)
        n, local = ep * pp, self._local_share
        grid = self._decode_attention

        def prices(kv_tokens, local_kv=None) -> list[float]:
            if not len(kv_tokens) or kv_tokens[0] <= 0:
                raise ValueError(f"kv_tokens: expected increasing positive cache sizes, got {kv_tokens!r}")
            whole = grid.rising(kv_tokens / n)
            layer = base + (1 - local) * whole
            if local:
                keys = kv_tokens if local_kv is None else local_kv
                part = whole if local_kv is None else np.array(grid.many((local_kv / n).tolist()))
                layer = np.where(keys != 0, layer + local * part, layer)
            total = pp * (stage_layers * layer) + head + edges + iteration
            return (np.maximum(total, floor) if floor else total).tolist()

        return prices

    def parts(self, prefill_tokens: int, prefill_pairs: float, decode_seqs: int, decode_kv: int,
              sampled: int, local_pairs: float | None = None, local_kv: float | None = None) -> dict[str, float]:
        """:meth:`seconds` split into :data:`PARTS` (priced exactly, not on the grid)."""
        ep, pp = self.ep, self.pp
        decode_seqs, decode_kv, local_kv = self._compiled(decode_seqs, decode_kv, local_kv)
        tokens = prefill_tokens + decode_seqs
        out = dict.fromkeys(PARTS, 0.0)
        if tokens <= 0:
            return out
        rank = max(1, round(tokens / (ep * pp)))
        layers, local = pp * self.stage_layers, self._local_share
        pieces = [(self._layer_parts(rank, generation=not prefill_tokens), layers)]
        if decode_kv:
            kv = decode_kv if local_kv is None else local_kv
            for keys, share in ((decode_kv, 1 - local), (kv, local)):
                if share and keys:
                    pieces.append((self._decode_attention_parts(max(1, round(keys / (ep * pp)))), layers * share))
        if prefill_tokens:
            q = max(1, round(prefill_tokens / (ep * pp)))
            pairs = prefill_pairs if local_pairs is None else local_pairs
            for keys, share in ((prefill_pairs, 1 - local), (pairs, local)):
                if share:
                    pieces.append((self._prefill_attention_parts(q, max(1, round(keys / prefill_tokens))),
                                   layers * share))
        pieces.append((self._head_parts(max(1, round(sampled / ep))) if sampled else dict.fromkeys(PARTS, 0.0), 1))
        pieces.append((self._edge_parts(max(1, round(tokens / ep))), 1))
        for piece, times in pieces:
            for key in PARTS:
                out[key] += piece[key] * times
        out["memory"] += pp * self.stage_layers * self.expert_decode_seconds(decode_seqs / (ep * pp))
        out["overhead"] += self._iteration
        # the frontend's host work the kernels do not hide (Engine.host_per_token)
        out["overhead"] += max(0.0, self.host_per_token * sampled - sum(out.values()))
        return out

    # -- the simulation's questions (planner.serving.simulation.Costs) ------------------------

    def _work(self, chunks) -> tuple[int, float, float | None]:
        """Queries of the prompt chunks, their (query, key) pairs in a full layer and in a local one."""
        queries = sum(c for c, _ in chunks)
        pairs = sum(c * (p + (c + 1) / 2) for c, p in chunks)
        local = sum(self.shape.local_pairs(c, p) for c, p in chunks) if self.prefill_local else None
        return queries, pairs, local

    def busiest_rank(self, chunks) -> tuple[int, float, float | None] | None:
        """The (prompt tokens, attention pairs, local-layer pairs) of the busiest of the ``ep`` ranks once the
        iteration's chunks are dealt out whole, the largest first to the least loaded rank (None with one rank)."""
        if self.ep == 1 or not chunks:
            return None
        ranks: list[list] = [[] for _ in range(self.ep)]
        for chunk in sorted(chunks, reverse=True):
            min(ranks, key=lambda r: sum(c for c, _ in r)).append(chunk)
        return self._work(max(ranks, key=lambda r: sum(c for c, _ in r)))

    def prefill(self, chunks, sampled: int) -> float:
        q, pairs, local = self._work(chunks)
        return self.seconds(q, pairs, 0, 0, sampled, local, None, self.busiest_rank(chunks))

    def mixed(self, chunks, batch: int, kv_tokens: int, sampled: int, local_kv: int | None = None) -> float:
        q, pairs, local = self._work(chunks)
        return self.seconds(q, pairs, batch, kv_tokens, sampled, local, local_kv, self.busiest_rank(chunks))

    def decode(self, batch: int, kv_tokens: int, padded: int, local_kv: int | None = None) -> float:
        return self.seconds(0, 0.0, batch, kv_tokens, batch, None, local_kv)

    def join(self, batch: int, padded: int, lengths) -> float:
        return 0.0  # a paged cache: joining sequences only adds block-table entries

    def leave(self, batch: int, padded: int, kept: int, kept_padded: int) -> float:
        return 0.0


__all__ = ["PARTS", "FusedCost", "Placement", "bound"]
