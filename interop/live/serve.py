"""``interop.serve``: a transformers causal LM served for real on the rack, prefill on one slot, decode on another.

Every prompt is prefilled whole on a prefill slot (the one free first, when several are
given); its KV cache (each layer's keys and values) and first token are copied to the
decode slot on a side stream of each end, a real copy placed on the timeline on the route
the rack's topology gives; the decode slot runs continuous batching: at each iteration it
compacts out finished sequences, admits those whose KV cache has arrived (first come,
first served, up to ``max_batch``), and decodes one greedy token for every sequence. The
batched code is :mod:`planner.serving.eager`'s, the same the serving what-if prices.

The tokens are computed (equal to transformers' ``generate`` on the CPU, greedy); TTFT
and TPOT are modelled: read from the timeline's clocks (every request arrives when
serving starts, all slots aligned).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Sequence

import torch

from planner.serving import eager
from planner.serving.workload import Workload


@dataclass(frozen=True)
class ServeResult:
    """What :func:`serve` computed and what the timeline modelled."""

    tokens: list[list[int]]
    """The generated ids of each prompt (computed; greedy)."""
    ttft: list[float]
    """Per request, seconds from the start of serving to its first token (modelled, from the timeline)."""
    tpot: list[float]
    """Per request, seconds per output token after the first (modelled; 0 for a single token)."""
    kv_bytes_moved: int
    """Bytes copied from the prefill slots to the decode slot (keys, values and first tokens)."""
    prefill_slots: tuple[int, ...]
    decode_slot: int
    max_batch: int | None
    """The decode slot's batch limit (None: every request that has arrived)."""
    prompt_lengths: tuple[int, ...] = field(repr=False)
    finish: list[float] = field(default_factory=list, repr=False)
    """Per request, seconds from the start to its last token (modelled)."""
    precision: str = "float32"
    """The model's parameters' dtype, the serving precision it ran in (``float32``, ``bfloat16``)."""
    rack: object = field(default=None, repr=False)
    """The :class:`devices.RackSpec` it was served on."""

    @property
    def workload(self) -> Workload:
        """The served requests as a :class:`Workload` (offline: every request queued at the start)."""
        out = len(self.tokens[0]) if self.tokens else 1
        return Workload([(n, out) for n in self.prompt_lengths])

    @property
    def engine(self):
        """The engine that ran: :meth:`planner.serving.Engine.eager` with this run's batch limit."""
        from planner.serving import Engine

        return Engine.eager(self.max_batch)

    def whatif_config(self) -> dict:
        """This run as :func:`interop.serving_whatif` keyword arguments: ``serving_whatif(model.config,
        **result.whatif_config())`` models the same run (rack, workload, prefill and decode slots, precision,
        the eager engine with its batch limit), whose TTFT and TPOT are the timeline's."""
        return dict(rack=self.rack, workload=self.workload, prefill=dict(slots=list(self.prefill_slots)),
                    decode=dict(slots=[self.decode_slot]), precision=self.precision, engine=self.engine)


def _slot(device, name: str, count: int) -> int:
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"{name}: expected a hybrid device ('hybrid:N') or a slot index, got {device!r}") from None
        if dev.type != "hybrid" or dev.index is None:
            raise ValueError(f"{name}: expected a hybrid device with an index ('hybrid:N'), got {device!r}")
        index = dev.index
    if not 0 <= index < count:
        raise ValueError(f"{name}: slot {index} is not on the current rack (slots 0-{count - 1})")
    return index


def _prompts(prompts) -> list[list[int]]:
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts: expected a non-empty list of token id lists (or 1-D tensors), got {prompts!r}")
    out = []
    for i, p in enumerate(prompts):
        ids = p.tolist() if isinstance(p, torch.Tensor) else p
        if isinstance(ids, torch.Tensor) or not isinstance(ids, (list, tuple)) or not ids or \
                not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise ValueError(f"prompts[{i}]: expected a non-empty list of non-negative token ids, got {p!r}")
        out.append(list(ids))
    return out


class _Clock:
    """Modelled seconds since the start of serving, read from events on the rack's timeline."""

    def __init__(self, slots: Sequence[int], streams: Sequence) -> None:
        from interop import hybrid

        marks = []
        for s in slots:
            e = hybrid.Event(enable_timing=True)
            e.record(hybrid.default_stream(s))
            marks.append(e)
        latest = max(marks, key=lambda e: marks[0].elapsed_time(e))
        for s in slots:
            latest.wait(hybrid.default_stream(s))
        for st in streams:
            latest.wait(st)
        self.start = latest

    def mark(self, stream) -> tuple[float, object]:
        from interop import hybrid

        e = hybrid.Event(enable_timing=True)
        e.record(stream)
        return self.start.elapsed_time(e) / 1e3, e


def serve(model, prompts, *, prefill="hybrid:0", decode="hybrid:4", max_new_tokens: int = 32,
          max_batch: int | None = None) -> ServeResult:
    """Serve ``prompts`` with ``model`` on the current rack: prefill on ``prefill`` (a slot or a list of
    slots), KV caches copied across the fabric, continuous-batching greedy decode on ``decode``
    (see the module doc). ``model``: a transformers causal LM (weights on the CPU; copied to the slots).
    ``prompts``: token id lists. Every prompt gets ``max_new_tokens`` tokens (no stop at EOS). Returns a
    :class:`ServeResult`; the same run modelled: ``interop.serving_whatif(model.config, **result.whatif_config())``
    (the eager engine with this batch limit, the same slots, precision and workload).
    """
    from interop import current_rack, hybrid

    rack = current_rack()
    if rack is None:
        raise RuntimeError("serve: no current rack (interop.set_rack or `with rack:`)")
    count = len(rack.devices)
    pre = [_slot(p, "prefill", count) for p in (prefill if isinstance(prefill, (list, tuple)) else [prefill])]
    if not pre:
        raise ValueError("prefill: give at least one slot")
    dec = _slot(decode, "decode", count)
    if dec in pre:
        raise ValueError(f"decode: slot {dec} is also a prefill slot; serve disaggregated on distinct slots")
    if len(set(pre)) != len(pre):
        raise ValueError(f"prefill: slots {pre} repeat")
    ids = _prompts(prompts)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected a positive integer, got {max_new_tokens!r}")
    if max_batch is not None and (isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1):
        raise ValueError(f"max_batch: expected a positive integer or None, got {max_batch!r}")
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise ValueError(f"model: expected a transformers causal LM module, got {type(model).__name__}")
    vocab = model.get_input_embeddings().num_embeddings
    for i, p in enumerate(ids):
        if max(p) >= vocab:
            raise ValueError(f"prompts[{i}]: token id {max(p)} is outside the model's vocabulary of {vocab}")

    import devices

    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        raise ValueError(f"model: its parameters mix dtypes {sorted(map(str, dtypes))}; serve one dtype")
    precision = devices.dtype_name(dtypes.pop())
    model = model.eval()
    models = {s: copy.deepcopy(model).to(f"hybrid:{s}") for s in pre + [dec]}
    on_slot = {s: [torch.tensor([p]).to(f"hybrid:{s}") for p in ids] for s in pre}
    side = {s: hybrid.Stream(device=s) for s in pre}
    channel = {s: hybrid.Stream(device=dec) for s in pre}
    clock = _Clock(pre + [dec], list(side.values()) + list(channel.values()))

    n = len(ids)
    first = [0.0] * n
    finish = [0.0] * n
    moved = 0
    free = {s: 0.0 for s in pre}
    arrivals: list[tuple[float, int, int, object, tuple]] = []
    first_tokens = {}
    for r in range(n):  # every request is waiting at the start: the slot free first takes the next one
        s = min(pre, key=lambda q: (free[q], pre.index(q)))
        keys, values, token = eager.prefill(models[s], on_slot[s][r])
        first[r], done = clock.mark(hybrid.default_stream(s))
        free[s] = first[r]
        first_tokens[r] = token
        if max_new_tokens == 1:
            finish[r] = first[r]
            continue
        done.wait(side[s])
        with hybrid.stream(side[s]), hybrid.stream(channel[s]):
            moved_keys = [k.to(f"hybrid:{dec}") for k in keys]
            moved_values = [v.to(f"hybrid:{dec}") for v in values]
            moved_token = token.to(f"hybrid:{dec}")
        moved += sum(t.numel() * t.element_size() for t in moved_keys + moved_values + [moved_token])
        arrived, event = clock.mark(channel[s])
        arrivals.append((first[r], pre.index(s), r, event, (moved_keys, moved_values, moved_token), arrived))

    steps: list[tuple[object, list[int]]] = []
    if arrivals:
        _decode(models[dec], dec, clock, sorted(arrivals, key=lambda a: (a[0], a[1])), max_new_tokens,
                max_batch or (1 << 30), finish, steps)
    tokens = [[int(first_tokens[r].cpu()[0])] for r in range(n)]
    for step_tokens, rows in steps:
        for row, value in zip(rows, step_tokens.cpu().tolist()):
            tokens[row].append(int(value))
    tpot = [(finish[r] - first[r]) / (max_new_tokens - 1) if max_new_tokens > 1 else 0.0 for r in range(n)]
    return ServeResult(tokens=tokens, ttft=first, tpot=tpot, kv_bytes_moved=moved, prefill_slots=tuple(pre),
                       decode_slot=dec, max_batch=max_batch, prompt_lengths=tuple(len(p) for p in ids),
                       finish=finish, precision=precision, rack=rack.spec)


def _decode(model, slot: int, clock: _Clock, pending: list, max_new_tokens: int, max_batch: int,
            finish: list[float], steps: list) -> None:
    """Continuous batching on ``slot`` until every pending request has all its tokens."""
    from interop import hybrid

    stream = hybrid.default_stream(slot)
    batch: eager.Batch | None = None
    rows: list[int] = []
    cache: dict[int, int] = {}  # request -> cached tokens
    produced: dict[int, int] = {}
    queue = list(pending)
    done_rows: list[bool] = []
    while queue or rows:
        now, _ = clock.mark(stream)
        if batch is not None and any(done_rows):
            keep = [not d for d in done_rows]
            rows = [r for r, k in zip(rows, keep) if k]
            batch = eager.compact(batch, eager.runs_of(keep), max(cache[r] for r in rows)) if rows else None
        joining = []
        while queue and queue[0][5] <= now and len(rows) + len(joining) < max_batch:
            joining.append(queue.pop(0))
        if not rows and not joining:
            head = queue.pop(0)
            head[3].wait(stream)
            now = head[5]
            joining = [head]
            while queue and queue[0][5] <= now and len(joining) < max_batch:
                joining.append(queue.pop(0))
        for item in joining:
            item[3].wait(stream)  # the copy is done (its arrival is not later than now): orders the timeline
            r = item[2]
            rows.append(r)
            cache[r] = int(item[4][0][0].shape[-2])
            produced[r] = 1
        if joining:
            batch = eager.merge(batch, [item[4] for item in joining])
        batch = eager.step(model, batch)
        t, _ = clock.mark(stream)
        steps.append((batch.tokens, list(rows)))
        done_rows = []
        for r in rows:
            cache[r] += 1
            produced[r] += 1
            if produced[r] == max_new_tokens:
                finish[r] = t
            done_rows.append(produced[r] == max_new_tokens)
        if all(done_rows):
            rows, batch, done_rows = [], None, []


__all__ = ["ServeResult", "serve"]
