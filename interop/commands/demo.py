"""`hybrid demo`: a GPT-style model trained on both kinds of chip of a rack.

What it shows, in order: the rack; a few training steps of the same model on
the CPU and on two slots of different kinds, with outputs, gradients and
parameters checked against the CPU run (computed truth); memory per slot.
Later sections add what the model would cost on the modelled hardware.
"""

from __future__ import annotations

import copy
import gc
from dataclasses import dataclass, field

import torch

import interop

from interop.models import GPT, GPTConfig, token_batch
from interop.rack import Rack, current_rack, set_rack
from devices.units import format_bytes
from devices.text_table import table


@dataclass(kw_only=True, slots=True)
class DemoConfig:
    """Knobs of ``hybrid demo`` (the CLI maps its flags onto these)."""

    rack: str = "fusion-default"
    """Rack spec or preset the demo runs on."""
    compare: tuple[str, ...] = ("h100-node", "trn3:16", "fusion-default")
    """Racks the modelled comparison runs the same model on (an H100 node, a 16-chip Trn3 slice of an
    UltraServer, the default rack)."""
    steps: int = 3
    """Training steps per run."""
    batch: int = 4
    """Sequences per step."""
    model: GPTConfig = field(default_factory=GPTConfig)
    """The GPT-style model's shape."""
    seed: int = 0
    """Seed for weights and data."""
    compile: bool = False
    """Also take the training step compiled (torch.compile) on each kind of slot: eager vs compiled modelled time."""


@dataclass(slots=True)
class SlotRun:
    slot: int
    kind: str
    projected: bool
    modelled_step_s: float
    """Modelled time of one training step on this slot (timeline busy time / steps)."""
    losses: list[float]
    max_abs_diff_logits: float
    max_abs_diff_grads: float
    max_abs_diff_params: float
    backing: str = "emulated"

    @property
    def exact(self) -> bool:
        return self.max_abs_diff_logits == 0 and self.max_abs_diff_grads == 0 and self.max_abs_diff_params == 0

    @property
    def ok(self) -> bool:
        """Emulated slots run the CPU's kernels: bit-identical. A real GPU runs its own kernels, which
        round differently: close is what is expected there."""
        if self.backing == "emulated":
            return self.exact
        return max(self.max_abs_diff_logits, self.max_abs_diff_grads, self.max_abs_diff_params) < GPU_TOLERANCE

    @property
    def verdict(self) -> str:
        if self.exact:
            return "exact"
        return "close (real GPU)" if self.ok else "DIFFERS"


GPU_TOLERANCE = 1e-3
"""Largest |difference| from the CPU accepted on a cuda-backed slot (float32 kernels differ in rounding)."""


@dataclass(slots=True)
class RackComparison:
    rack: str
    kind: str
    slot: int
    projected: bool
    modelled_step_s: float


@dataclass(slots=True)
class DemoResult:
    rack: Rack
    cpu_losses: list[float]
    runs: list[SlotRun]
    memory: list[dict]
    comparison: list[RackComparison] = field(default_factory=list)
    data_parallel: "DataParallelResult | None" = None
    compiled: list = field(default_factory=list)
    """Eager vs compiled steps (interop.commands.demo_compile.CompiledStep), with --compile."""

    @property
    def ok(self) -> bool:
        from interop.commands.demo_compile import LOSS_TOLERANCE

        dp_ok = self.data_parallel is None or self.data_parallel.ok
        compiled_ok = all(c.loss_diff < LOSS_TOLERANCE for c in self.compiled)
        return all(r.ok for r in self.runs) and dp_ok and compiled_ok


def _train(model: GPT, batches, device: torch.device | str, steps: int):
    """Train in place; return per-step losses, the last logits and gradients."""
    model.to(device)
    # The implementation is pinned: by default torch picks the multi-tensor
    # (foreach) path for accelerators and the per-tensor loop on the CPU, and
    # the two round differently. Both runs use the foreach path.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    losses, logits, grads = [], None, None
    for step in range(steps):
        idx, tgt = (t.to(device) for t in batches[step])
        opt.zero_grad(set_to_none=True)
        logits = model(idx)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        loss.backward()
        grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
        opt.step()
        losses.append(loss.item())
    return losses, logits.detach().cpu(), grads


def _max_diff(a, b) -> float:
    if isinstance(a, torch.Tensor):
        return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
    return max((_max_diff(x, y) for x, y in zip(a, b)), default=0.0)


def pick_slots(rack: Rack) -> list[int]:
    """The first slot of each distinct kind, so the demo runs on every kind present."""
    seen: dict[str, int] = {}
    for d in rack.devices:
        seen.setdefault(d.kind, d.index)
    return list(seen.values())


def run(cfg: DemoConfig | None = None, *, echo=print) -> DemoResult:
    """Run the demo and return its results (``echo`` receives the printed text)."""
    cfg = cfg or DemoConfig()
    rack = Rack.from_spec(cfg.rack) if current_rack() is None or current_rack().name != cfg.rack else current_rack()
    set_rack(rack)

    echo(f"== rack {rack.name}: {len(rack)} slots ({rack.spec.source}) ==")
    echo(table(
        ["slot", "kind", "chip", "backing", "capacity", "domain", "spec status"],
        [[f"hybrid:{d.index}", d.kind, d.spec.name, d.backing, format_bytes(d.capacity), d.domain,
          "projected" if d.spec.projected else "published/secondary"] for d in rack.devices],
        align="llllrll",
    ))

    torch.manual_seed(cfg.seed)
    reference = GPT(cfg.model)
    batches = [token_batch(cfg.model, cfg.batch, seed=cfg.seed + s) for s in range(cfg.steps)]
    cpu_model = copy.deepcopy(reference)
    cpu_losses, cpu_logits, cpu_grads = _train(cpu_model, batches, "cpu", cfg.steps)
    cpu_params = [p.detach().clone() for p in cpu_model.parameters()]

    runs: list[SlotRun] = []
    slots = pick_slots(rack)
    echo(f"\n== training: GPT-style model ({sum(p.numel() for p in reference.parameters()):,} parameters), "
         f"{cfg.steps} AdamW steps on the CPU and on slots {', '.join(f'hybrid:{s}' for s in slots)} ==")
    for i in range(len(rack)):
        torch.hybrid.reset_peak_memory_stats(i)
    for slot in slots:
        model = copy.deepcopy(reference)
        interop.reset_timeline()
        losses, logits, grads = _train(model, batches, f"hybrid:{slot}", cfg.steps)
        step_s = interop.report().slot(slot).busy_s / cfg.steps
        params = [p.detach().cpu() for p in model.parameters()]
        runs.append(SlotRun(slot, rack.devices[slot].kind, rack.devices[slot].spec.projected, step_s, losses,
                            _max_diff(logits, cpu_logits), _max_diff(grads, cpu_grads), _max_diff(params, cpu_params),
                            rack.devices[slot].backing))
        del model
    rows = [["cpu (reference)", "-", " ".join(f"{x:.4f}" for x in cpu_losses), "-", "-", "-", "-"]]
    for r in runs:
        rows.append([f"hybrid:{r.slot}", r.kind, " ".join(f"{x:.4f}" for x in r.losses),
                     f"{r.max_abs_diff_logits:.1e}", f"{r.max_abs_diff_grads:.1e}", f"{r.max_abs_diff_params:.1e}",
                     r.verdict])
    echo(table(["where", "kind", "losses (computed)", "|dlogits|", "|dgrads|", "|dparams|", "vs CPU"], rows,
               align="lllrrrl"))
    echo("\n== modelled step time per slot (cost model on the catalogue figures; * = projected chip) ==")
    echo(table(["slot", "kind", "modelled ms/step", "modelled steps/s"],
               [[f"hybrid:{r.slot}", r.kind + ("*" if r.projected else ""), f"{r.modelled_step_s * 1e3:.3f}",
                 f"{1 / r.modelled_step_s:,.0f}" if r.modelled_step_s else "-"] for r in runs], align="llrr"))

    memory = []
    for d in rack.devices:
        s = torch.hybrid.memory_stats(d.index)
        memory.append({"slot": d.index, "kind": d.kind, "allocated": s["allocated_bytes.all.current"],
                       "peak": s["allocated_bytes.all.peak"], "capacity": s["capacity"],
                       "allocations": s["allocation.all.allocated"]})
    echo("\n== memory per slot (peak during the training runs; counted against the modelled HBM) ==")
    echo(table(["slot", "kind", "in use", "peak", "capacity", "peak % of HBM", "allocations"],
               [[f"hybrid:{m['slot']}", m["kind"], format_bytes(m["allocated"]), format_bytes(m["peak"]),
                 format_bytes(m["capacity"]), f"{100 * m['peak'] / m['capacity']:.4f} %", m["allocations"]]
                for m in memory], align="llrrrrr"))
    result = DemoResult(rack, cpu_losses, runs, memory)
    result.data_parallel = data_parallel_step(cfg, reference, rack, echo)
    if cfg.compile:
        from interop.commands.demo_compile import compile_comparison

        result.compiled = compile_comparison(reference, batches[0], slots, echo)
    result.comparison = compare_racks(cfg, reference, batches, echo)
    set_rack(rack)
    exact = all(r.exact for r in result.runs)
    _echo_divergences(echo)
    echo("\nresult: " + ("every slot matched the CPU exactly" if result.ok and exact else
                         "every slot matched the CPU (emulated exactly, real GPUs within tolerance)" if result.ok
                         else "MISMATCH against the CPU"))
    return result


def _echo_divergences(echo) -> None:
    """What the real chips would do differently with the demo's ops (device fidelity), one line each."""
    from interop.fidelity import divergences

    met = {(d.kind, d.op, d.dtype, d.outcome, d.instead) for d in divergences()}
    if met:
        echo("\n== device fidelity: ops a real chip would treat differently (computed exactly here; "
             "sources: interop.divergences()) ==")
        for kind, op, dtype, outcome, instead in sorted(met):
            echo(f"  {op} in {dtype} on {kind}: {outcome} (instead: {instead or '-'})")


@dataclass(slots=True)
class DataParallelResult:
    slots: list[int]
    replicas_identical: bool
    """Every replica holds bit-identical parameters after the step (within tolerance where real GPUs take part)."""
    max_abs_diff_vs_cpu: float
    """Against one CPU step on the whole batch (averaging shard gradients rounds differently)."""
    step_s: float
    """Modelled time of the step (slowest slot's busy time)."""
    all_reduce_s: float
    all_reduce_algorithm: str
    all_reduce_bytes: int

    @property
    def ok(self) -> bool:
        return self.replicas_identical and self.max_abs_diff_vs_cpu < GPU_TOLERANCE


def data_parallel_step(cfg: DemoConfig, reference: GPT, rack: Rack, echo) -> DataParallelResult:
    """One data-parallel training step over every slot: each replica takes a shard of the batch, the
    gradients are averaged by an all_reduce on the fabric (one flat bucket), then each replica steps."""
    from collectives import in_process as hc

    slots = [d.index for d in rack.devices]
    n = len(slots)
    idx, tgt = token_batch(cfg.model, cfg.batch * n, seed=cfg.seed + 100)
    replicas = [copy.deepcopy(reference).to(f"hybrid:{s}") for s in slots]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, foreach=True) for m in replicas]
    interop.reset_timeline()
    for i, (model, slot) in enumerate(zip(replicas, slots)):
        shard = slice(i * cfg.batch, (i + 1) * cfg.batch)
        logits = model(idx[shard].to(f"hybrid:{slot}"))
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[shard].to(f"hybrid:{slot}").flatten()).backward()
    buckets = [torch.cat([p.grad.reshape(-1) for p in m.parameters()]) for m in replicas]
    reduced = hc.all_reduce(buckets, op="avg")
    for model, bucket, opt in zip(replicas, buckets, opts):
        offset = 0
        for p in model.parameters():
            p.grad.copy_(bucket[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        opt.step()
    rep = interop.report()
    step_s = max(rep.slot(s).busy_s for s in slots)

    cpu = copy.deepcopy(reference)
    logits = cpu(idx)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    torch.optim.SGD(cpu.parameters(), lr=0.1, foreach=True).step()
    first = [p.detach().cpu() for p in replicas[0].parameters()]
    mixed = any(not d.backing.is_emulated for d in rack.devices)
    if mixed:  # GPU kernels round differently from the CPU's: the replicas agree closely, not bitwise
        identical = all(torch.allclose(a, b.detach().cpu(), atol=GPU_TOLERANCE)
                        for m in replicas[1:] for a, b in zip(first, m.parameters()))
    else:
        identical = all(torch.equal(a, b.detach().cpu()) for m in replicas[1:] for a, b in zip(first, m.parameters()))
    diff = _max_diff(first, [p.detach() for p in cpu.parameters()])
    est = reduced.estimate
    result = DataParallelResult(slots, identical, diff, step_s, est.seconds, est.algorithm, int(buckets[0].numel() * 4))
    del replicas, opts, buckets, reduced
    echo(f"\n== data-parallel step on all {n} slots: gradients averaged by an all_reduce on the fabric ==")
    echo(table(["what", "value"], [
        ["replicas bit-identical after the step (computed)", "yes" if identical else "NO"],
        ["max |param - single-CPU full-batch step| (computed)", f"{diff:.1e}"],
        ["gradient bucket", format_bytes(result.all_reduce_bytes) + " float32 per slot"],
        ["all_reduce algorithm (chosen by modelled time)", est.algorithm],
        ["all_reduce time (modelled)", f"{est.seconds * 1e6:.2f} us, busbw {est.busbw / 1e9:.1f} GB/s"],
        ["step time, slowest slot (modelled)", f"{step_s * 1e3:.3f} ms"],
    ], align="lr"))
    return result


def compare_racks(cfg: DemoConfig, reference: GPT, batches, echo) -> list[RackComparison]:
    """The same training step on one slot of each kind of several racks, modelled."""
    out: list[RackComparison] = []
    for spec in cfg.compare:
        gc.collect()
        rack = set_rack(Rack.from_spec(spec))
        for slot in pick_slots(rack):
            model = copy.deepcopy(reference)
            interop.reset_timeline()
            _train(model, batches[:1], f"hybrid:{slot}", 1)
            step = interop.report().slot(slot).busy_s
            out.append(RackComparison(rack.name, rack.devices[slot].kind, slot, rack.devices[slot].spec.projected,
                                      step))
            del model
    gc.collect()
    base = out[0].modelled_step_s if out else 0.0
    echo(f"\n== the same training step on three racks (modelled; * = projected chip; relative to {out[0].kind} "
         f"on {out[0].rack}) ==")
    echo(table(["rack", "kind", "modelled ms/step", "relative"],
               [[c.rack, c.kind + ("*" if c.projected else ""), f"{c.modelled_step_s * 1e3:.3f}",
                 f"{base / c.modelled_step_s:.2f}x" if c.modelled_step_s else "-"] for c in out], align="llrr"))
    return out
