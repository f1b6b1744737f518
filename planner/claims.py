"""AWS's re:Invent 2025 claims for Trn3 against Trn2 UltraServers, beside what the catalogue and the models give.

Each :class:`Claim` holds what was said and by whom (press and the launch blog: secondary), the ratio the
catalogue gives (the Trn3 Gen2 UltraServer of 144 chips, ``trn3-ultraserver``, against the Trn2 UltraServer of
64, ``trn2-ultraserver``; their documented totals are reproduced from the chips' figures), the arithmetic, and a
verdict: ``reproduced`` (within the claim's rounding), ``differs`` (with the figures saying why) or ``not
checkable`` (a figure the claim needs is not public). :func:`serving_claims` answers the serving claim with the
serving what-if on the model AWS named (GPT-OSS), torch-free; :func:`model_claims` adds what the step model gives
for a training model (:data:`MODEL` unless another is named): energy per token, throughput per chip, and the Trn3
price per chip-hour at which the cost claim would hold against :data:`GPU` (a break-even), every such figure
modelled. :func:`table` prints them for a terminal, or as Markdown for a renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

import devices
from devices.chip_set import DEFAULT_BASIS, ChipSet
from devices.fabrics import TRN1_ULTRACLUSTER_CHIPS

TRN3 = "trn3-ultraserver"
"""The Trn3 Gen2 UltraServer preset (144 Trainium3)."""
TRN2 = "trn2-ultraserver"
"""The Trn2 UltraServer preset (64 Trainium2)."""
GPU = "h200-node*18"
"""The GPU alternative of the cost claim: 144 H200 (the GPUs with both an on-demand and a capacity-block price)."""
MILLION = "trn3-ultraserver*7282"
"""A Trn3 cluster of 1,048,608 chips."""
MODEL = "llama3-70b"
"""The training model of :func:`model_claims` when none is named (``hybrid claims``): a model of the size these
UltraServers train, whose block profiles ship (:mod:`planner.shipped_profiles`), so the answer costs no trace."""
GLOBAL_BATCH, SEQ_LEN = 1024, 8192
"""The training step of :func:`model_claims`: 1,024 sequences of 8,192 tokens (8 Mi tokens)."""

_LAUNCH = "AWS launch blog (2025-12-02) via AIwire"
_TECHCRUNCH = "TechCrunch (2025-12-02)"


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim, what the catalogue (and the model) give, and the verdict."""

    claim: str
    said_by: str
    """Who said it (secondary sources: press, the launch blog as reported)."""
    claimed: float | None
    """The claimed ratio (Trn3 over Trn2, or over the GPU alternative), where it is a number."""
    found: float | None
    """The ratio the catalogue or the model gives (None: not computable from public figures)."""
    working: str
    """The arithmetic, with the figures."""
    verdict: str
    """``reproduced``, ``differs`` or ``not checkable``."""
    why: str
    modelled: bool = False
    """True when :attr:`found` comes from the step model rather than catalogue figures alone."""
    break_even: float | None = None
    """For a cost claim: the Trn3 price per chip-hour at which it would hold (modelled; no Trn3 price is public)."""


def _verdict(found: float, claimed: float, tolerance: float) -> str:
    return "reproduced" if abs(found / claimed - 1) <= tolerance + 1e-9 else "differs"


def _sum(spec, field: str) -> float:
    return sum(n * getattr(devices.chip(k), field).value for k, n in spec.counts().items())


def catalogue_claims() -> list[Claim]:
    """The claims the catalogue alone can check."""
    t3, t2 = devices.parse_rack(TRN3), devices.parse_rack(TRN2)
    c3, c2 = ChipSet.of(t3), ChipSet.of(t2)
    n3, n2 = len(t3), len(t2)
    k3, k2 = devices.chip("trn3"), devices.chip("trn2")
    out = []

    compute = c3.peak("float8") / c2.peak("float8")
    out.append(Claim(
        "up to 4.4x compute", f"{_LAUNCH}; {_TECHCRUNCH}", 4.4, compute,
        f"{n3} x {k3.peak['float8'].value / 1e12:,.0f} TFLOPS MXFP8 = {c3.peak('float8') / 1e12:,.0f} against "
        f"{n2} x {k2.peak['float8'].value / 1e12:,.0f} FP8 = {c2.peak('float8') / 1e12:,.0f}: {compute:.2f}x",
        _verdict(compute, 4.4, 0.05), "the UltraServers' dense FP8 totals; 4.36x rounds to 4.4x"))

    memory = _sum(t3, "hbm_capacity") / _sum(t2, "hbm_capacity")
    per_chip = k3.hbm_capacity.value / k2.hbm_capacity.value
    out.append(Claim(
        "4x memory (capacity)", f"{_TECHCRUNCH} (republished); the seed", 4.0, memory,
        f"{k3.hbm_capacity.value / 2**30:,.0f} GiB x {n3} = {_sum(t3, 'hbm_capacity') / 2**30:,.0f} GiB against "
        f"{k2.hbm_capacity.value / 2**30:,.0f} GiB x {n2} = {_sum(t2, 'hbm_capacity') / 2**30:,.0f} GiB: {memory:.2f}x",
        _verdict(memory, 4.0, 0.05),
        f"HBM capacity grows {memory:.1f}x per UltraServer and {per_chip:.1f}x per chip, not 4x (4x is roughly the "
        f"memory bandwidth's ratio)"))

    bandwidth = _sum(t3, "hbm_bandwidth") / _sum(t2, "hbm_bandwidth")
    out.append(Claim(
        "nearly 4x memory bandwidth", _LAUNCH, 4.0, bandwidth,
        f"{n3} x {k3.hbm_bandwidth.value / 1e12:.1f} TB/s = {_sum(t3, 'hbm_bandwidth') / 1e12:,.1f} TB/s against "
        f"{n2} x {k2.hbm_bandwidth.value / 1e12:.1f} TB/s = {_sum(t2, 'hbm_bandwidth') / 1e12:,.1f} TB/s: "
        f"{bandwidth:.2f}x", _verdict(bandwidth, 4.0, 0.10), "'nearly 4x': 3.80x"))

    p3, p2 = k3.power, k2.power
    per_watt = (k3.peak["float8"].value / p3.value) / (k2.peak["float8"].value / p2.value)
    out.append(Claim(
        "40 % better energy efficiency (some quotes: 4x)", f"40 %: {_TECHCRUNCH}, the seed; 4x: AIwire, Tom's Hardware",
        1.4, per_watt,
        f"peak FP8 per board watt: {k3.peak['float8'].value / 1e12:,.0f} TFLOPS / {p3.value:,.0f} W against "
        f"{k2.peak['float8'].value / 1e12:,.0f} / {p2.value:,.0f} W: {per_watt:.2f}x",
        "differs",
        f"AWS publishes no power for either chip: both are estimates (Trn3 {p3.status}: an inference from an AWS "
        f"remark; Trn2 {p2.status}: a third party's). On them 1.4x would need Trn3 at "
        f"{k3.peak['float8'].value / (1.4 * k2.peak['float8'].value / p2.value):,.0f} W or less; 4x is further off"))

    import collectives

    million = len(devices.parse_rack(MILLION))
    reduce = collectives.estimate(MILLION, "all_reduce", 1 << 30)
    out.append(Claim(
        "clusters of up to 1 million chips, 10x the previous generation", f"{_TECHCRUNCH}; Yahoo News TW", 10.0,
        None,
        f"{MILLION} = {million:,} Trn3 (a 1 GiB all-reduce over all of them: {reduce.seconds * 1e3:,.0f} ms, "
        f"modelled); Trn1 UltraClusters: over "
        f"{TRN1_ULTRACLUSTER_CHIPS.value:,.0f} chips, so 1M is {million / TRN1_ULTRACLUSTER_CHIPS.value:.1f}x Trn1's",
        "not checkable", "the documentation gives no Trn2 cluster maximum to compare with"))

    out.append(Claim(
        "training cost up to 50 % lower than GPU alternatives", "the seed (customer reports)", 0.5, None,
        f"needs a Trn3 price: {k3.missing('price.on-demand')}", "not checkable",
        "no public Trn3 price; the step model gives the Trn3 price per chip-hour at which it would hold "
        "(model_claims: a break-even, modelled)"))

    fp8 = k3.peak["float8"].value / k2.peak["float8"].value
    hbm = k3.hbm_bandwidth.value / k2.hbm_bandwidth.value
    out.append(Claim(
        "3x throughput per chip (serving)", "AWS internal GPT-OSS test (thelettertwo.com; nand-research.com)", 3.0,
        max(fp8, hbm),
        f"per chip: FP8 {k3.peak['float8'].value / 1e12:,.0f} / {k2.peak['float8'].value / 1e12:,.0f} TFLOPS = "
        f"{fp8:.2f}x (prefill), HBM {k3.hbm_bandwidth.value / 1e12:.1f} / {k2.hbm_bandwidth.value / 1e12:.1f} TB/s "
        f"= {hbm:.2f}x (decode)", "differs",
        "a ratio only, with no absolute Trn3 figure; like for like the chips give at most "
        f"{max(fp8, hbm):.1f}x, so 3x needs more than the hardware (software, a larger batch or another precision)"))
    return out


def gpt_oss_120b():
    """GPT-OSS-120B's architecture as numbers (the serving shape needs no transformers and no torch): the serving
    golden rows' (:data:`planner.serving.golden_models.MODELS`)."""
    from planner.serving.golden_models import MODELS

    return MODELS["gpt-oss-120b"]


SERVING_LENGTHS = (1024, 1024)
"""Input and output tokens per request of the serving claim's workload: AWS gives none (an assumption, said so)."""
SERVING_REQUESTS_PER_CHIP = 2048
"""Requests per chip, all queued at once: more than either UltraServer's KV caches hold at a time (about 800-1,000
sequences per chip), so every instance runs full batches and throughput per chip is the chips', not the queue's."""


def serving_claims() -> list[Claim]:
    """The serving claim with the serving what-if: GPT-OSS-120B (the model AWS named) on each UltraServer, like for
    like in FP8 (Trn2 has no FP4), the fitted production engine, a saturating offline workload (every figure
    modelled; torch-free)."""
    from planner.serving import Workload, serving_whatif

    isl, osl = SERVING_LENGTHS
    model = gpt_oss_120b()

    def run(rack: str, precision: str):
        chips = len(devices.parse_rack(rack))
        return serving_whatif(model, rack, workload=Workload(isl, osl, requests=SERVING_REQUESTS_PER_CHIP * chips),
                              precision=precision)

    e3, e2, e3fp4 = run(TRN3, "fp8"), run(TRN2, "fp8"), run(TRN3, "fp4")
    through = e3.output_tokens_per_second_per_chip / e2.output_tokens_per_second_per_chip
    fp4 = e3fp4.output_tokens_per_second_per_chip / e2.output_tokens_per_second_per_chip
    k3, k2 = devices.chip("trn3"), devices.chip("trn2")
    hbm = k3.hbm_bandwidth.value / k2.hbm_bandwidth.value
    what = (f"gpt-oss-120b, {isl:,} in / {osl:,} out tokens, {SERVING_REQUESTS_PER_CHIP:,} requests per chip queued at "
            f"once, the fitted production engine (modelled)")
    return [Claim(
        "3x throughput per chip (serving)", "as above: AWS's internal test with OpenAI's GPT-OSS", 3.0, through,
        f"{what}: FP8 {e3.output_tokens_per_second_per_chip:,.0f} output tokens/s per chip on {TRN3} against "
        f"{e2.output_tokens_per_second_per_chip:,.0f} on {TRN2}: {through:.2f}x (Trn3 in MXFP4, GPT-OSS's own "
        f"weights: {fp4:.2f}x; decode {e3.bound['decode']}-bound on Trn3, {e2.bound['decode']}-bound on Trn2)",
        _verdict(through, 3.0, 0.10),
        f"AWS gives no lengths, precision, batch or engine: those are assumed (said here); per chip the FP8 peak is "
        f"{k3.peak['float8'].value / k2.peak['float8'].value:.2f}x and the HBM bandwidth {hbm:.2f}x (capacity "
        f"{k3.hbm_capacity.value / k2.hbm_capacity.value:.2f}x: larger batches), so like for like the modelled "
        f"ratio stays near them; 3x needs more than the hardware as modelled (another engine, precision or batch "
        f"on Trn3)",
        modelled=True)]


def model_queries(model: str = MODEL, *, global_batch: int = GLOBAL_BATCH, seq_len: int = SEQ_LEN) -> list[dict]:
    """The what-ifs :func:`model_claims` runs (:func:`planner.whatif.whatif`'s arguments): FP8 training of ``model``
    on Trn3, Trn2 and the GPU rack, each in its default configuration (:mod:`planner.shipped_profiles` ships the
    profiles of :data:`MODEL`'s)."""
    return [dict(model=model, rack=rack, parallel=None, global_batch=global_batch, seq_len=seq_len, precision="fp8")
            for rack in (TRN3, TRN2, GPU)]


def model_claims(model: str = MODEL, *, global_batch: int = GLOBAL_BATCH, seq_len: int = SEQ_LEN,
                 price_basis: str = DEFAULT_BASIS) -> list[Claim]:
    """What the step model gives for the energy, cost and per-chip throughput claims on ``model`` (FP8 training,
    each rack's default configuration; every figure modelled)."""
    from planner.whatif import whatif

    e3, e2, eg = (whatif(q.pop("model"), q.pop("rack"), **q, price_basis=price_basis)
                  for q in model_queries(model, global_batch=global_batch, seq_len=seq_len))
    what = f"{model}, FP8, {global_batch:,} x {seq_len:,} tokens (modelled)"
    out = []
    energy = e2.joules_per_token / e3.joules_per_token
    out.append(Claim(
        "40 % better energy efficiency", "as above", 1.4, energy,
        f"{what}: {e2.joules_per_token:.3f} J/token on {TRN2} against {e3.joules_per_token:.3f} on {TRN3}: "
        f"{energy:.2f}x", _verdict(energy, 1.4, 0.05),
        "board power estimates x modelled step time; the power figures are estimates", modelled=True))
    through = e3.tokens_per_second_per_chip / e2.tokens_per_second_per_chip
    out.append(Claim(
        "3x throughput per chip (training, beside the serving claim)", "as above (said of serving)", 3.0, through,
        f"{what}, training: {e3.tokens_per_second_per_chip:,.0f} tokens/s per chip on {TRN3} against "
        f"{e2.tokens_per_second_per_chip:,.0f} on {TRN2}: {through:.2f}x", _verdict(through, 3.0, 0.05),
        "training, for comparison: the claim was made of serving (its row above)", modelled=True))
    gpu_cost = eg.usd_per_million_tokens
    gpus = f"{len(devices.parse_rack(GPU))} H200 ({GPU})"
    if gpu_cost is None:
        working = f"{GPU} has no {price_basis} price: {eg.economics.price.reason}"
        price = None
    else:
        # Trn3 at price p per chip-hour costs p / (3600 x tokens/s per chip) per token: half the GPU's at p*.
        price = 0.5 * gpu_cost / 1e6 * e3.tokens_per_second_per_chip * 3600
        working = (f"{what}: {gpus} ${gpu_cost:,.3f} per M tokens ({price_basis}); Trn3 at "
                   f"{e3.tokens_per_second_per_chip:,.0f} tokens/s per chip is 50 % cheaper at up to ${price:,.2f} "
                   f"per chip-hour (the break-even)")
    out.append(Claim(
        "training cost up to 50 % lower than GPU alternatives", "as above", 0.5, None, working, "not checkable",
        f"no public Trn3 price; the figure is the Trn3 price per chip-hour at which the claim would hold against "
        f"{gpus} training {model} (a break-even, modelled)", modelled=True, break_even=price))
    return out


def claims(model: str | None = MODEL, **kwargs) -> list[Claim]:
    """Every claim the catalogue checks, the serving claim modelled (:func:`serving_claims`), then what the step
    model gives on ``model`` (:func:`model_claims`; None: none of it)."""
    out = catalogue_claims() + serving_claims()
    if model is not None:
        out += model_claims(model, **kwargs)
    return out


HEADERS = ["claim", "said by", "claimed", "found", "verdict", "the figures", "why"]
"""The columns of :func:`table`."""


def _cells(c: Claim) -> list[str]:
    claimed = "-" if c.claimed is None else f"{c.claimed:g}x"
    found = "-" if c.found is None else f"{c.found:.2f}x" + (" (modelled)" if c.modelled else "")
    if c.break_even is not None:
        found = f"${c.break_even:,.2f} per Trn3 chip-hour (break-even against {GPU}, modelled)"
    return [c.claim, c.said_by, claimed, found, c.verdict, c.working, c.why]


def table(rows: list[Claim], *, markdown: bool = False) -> str:
    """The claims for a terminal, within 120 columns (:func:`devices.text_table.table`): the verdicts (claim,
    claimed, found, verdict, said by), then the figures and why of each; with ``markdown``, one Markdown table of
    :data:`HEADERS` for a renderer (a document, an issue)."""
    from devices.text_table import markdown as markdown_table
    from devices.text_table import table as text_table

    cells = [_cells(c) for c in rows]
    if markdown:
        return markdown_table(HEADERS, cells)
    verdicts = text_table(["claim", "claimed", "found", "verdict", "said by"],
                          [[r[0], r[2], r[3], r[4], r[1]] for r in cells], align="lrrll",
                          wrap=[32, None, 24, None, None])
    figures = text_table(["claim", "the figures", "why"], [[r[0], r[5], r[6]] for r in cells], align="lll",
                         wrap=[24, None, None])
    return verdicts + "\n\n" + figures


__all__ = ["GLOBAL_BATCH", "GPU", "HEADERS", "MILLION", "MODEL", "SEQ_LEN", "SERVING_LENGTHS",
           "SERVING_REQUESTS_PER_CHIP", "TRN2", "TRN3", "Claim", "catalogue_claims", "claims", "gpt_oss_120b",
           "model_claims", "model_queries", "serving_claims", "table"]
