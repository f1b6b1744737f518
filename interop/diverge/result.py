"""What ``hybrid diverge`` reports: the first point that differs, the last that agreed, as an object, text and
JSON (the field names are fixed: tools read them)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from interop.diverge import compare, tolerance
from interop.diverge.recorder import LOSS
from interop.diverge.tensors import FULL_LIMIT, SAMPLES

CPU_REFERENCES = ("cpu", "gloo")
"""The references that run plain torch on the CPU (one process, or the same ranks over Gloo): their random draws
come from the CPU's generator, the run's on cuda from its slot's."""


@dataclass
class Point:
    """One recorded point of the run, compared with the reference."""

    step: int
    """Counted from 1, the first optimizer step (``init``: the parameters entering step 1)."""
    module: str
    """The qualified name as in ``named_modules()`` ('' is the outermost module)."""
    phase: str
    """``init``, ``forward``, ``input_grad``, ``param_grad`` or ``update``."""
    call_index: int
    """Which call of the module in the step (0 for the phases about parameters)."""
    max_abs_diff: float
    max_rel_diff: float
    """``max_abs_diff`` relative to the reference's largest |element| (see :mod:`interop.diverge.tolerance`)."""
    call_site: str | None
    """``file:line`` of the module's call in the user's code."""
    collective_before: str | None
    """The collective the run under test issued nearest before this point, on the rank that differs."""
    tensor: str = ""
    """Which tensor of the point: an output's path ('output', 'loss', '[0]'), a parameter's name, 'args[0]'."""
    rank: int | None = None
    """The rank of the run under test (None: a mean over ranks; in one process with ``nn.DataParallel``, the
    replica's index for a replica's module call, each replica compared as a rank)."""
    tolerance: str = ""
    compared: str = ""
    """How the two were set side by side: 'full', a shard's offset, a slice, sampled elements."""
    test_max: float = 0.0
    reference_max: float = 0.0
    cause: str | None = None
    """'randomness' when the module's call drew random numbers in either run."""
    replica: int | None = None
    """The ``nn.DataParallel`` replica (its slice of the batch) whose module call this is, if one's."""

    def describe(self) -> str:
        where = f"module {self.module or '(the model)'!r}" + (f" ({self.tensor})" if self.tensor else "")
        lines = [f"step {self.step}, {where}, phase {self.phase}, call {self.call_index}"
                 + (f", DataParallel replica {self.replica}" if self.replica is not None else
                    f", rank {self.rank}" if self.rank is not None else ""),
                 f"max |diff| {_num(self.max_abs_diff)}, relative {_num(self.max_rel_diff)} (tolerance "
                 f"{self.tolerance})",
                 f"|run| max {_num(self.test_max)}, |reference| max {_num(self.reference_max)}{self._ratio()}; "
                 f"compared {self.compared}"]
        if self.call_site:
            lines.append(f"called at {self.call_site}")
        if self.collective_before:
            lines.append(f"collective before it: {self.collective_before}")
        if self.cause:
            lines.append(f"cause: {self.cause}")
        return "\n".join([lines[0], *(_wrap(line, "    ") for line in lines[1:])])


    def _ratio(self) -> str:
        if self.reference_max and math.isfinite(self.test_max) and math.isfinite(self.reference_max) and \
                0 < self.test_max and not 0.99 < self.test_max / self.reference_max < 1.01:
            return f" (ratio {self.test_max / self.reference_max:.3g})"
        return ""


def _wrap(text: str, indent: str) -> str:
    """A report line within the CLI's width (:func:`devices.text_table.paragraph`), continued 2 columns in."""
    from devices.text_table import paragraph

    return paragraph(indent + text, indent=indent + "  ")


def _num(value: float) -> str:
    return str(value) if math.isnan(value) or math.isinf(value) else f"{value:.3g}"


@dataclass
class DivergeResult:
    """The answer of ``interop.diverge``: where the run under test first parts from its reference."""

    diverged: bool
    first: Point | None
    last_agreed: Point | None
    steps: int
    """The optimizer steps both runs recorded."""
    points_compared: int
    run: str
    """The run under test, in words."""
    reference: str
    tolerance: str = field(default_factory=tolerance.describe)
    memory: str = (f"tensors of at most {FULL_LIMIT} elements kept whole; larger ones as an exact digest and "
                   f"about {SAMPLES} elements sampled at the same global positions on both sides")
    notes: list = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return 1 if self.diverged else 0

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def __str__(self) -> str:
        head = (f"hybrid diverge: {self.run} against {self.reference}, {self.steps} step(s), "
                f"{self.points_compared} points compared")
        lines = [head]
        if self.diverged:
            lines.append(f"DIVERGED at {self.first.describe()}")
            lines.append("last agreed: " + (self.last_agreed.describe() if self.last_agreed else "nothing"))
        else:
            lines.append("the runs agree: every point compared is within tolerance")
        lines += [_wrap(f"note: {n}", "") for n in self.notes]
        lines.append(_wrap(f"tolerance: {self.tolerance}", ""))
        lines.append(_wrap(f"memory: {self.memory}", ""))
        return "\n".join(lines)


def _collective_before(records: dict, seq: int) -> str | None:
    before = [c for c in records.get("collectives", []) if c["seq"] < seq]
    if not before:
        return None
    c = before[-1]
    shapes = ", ".join(f"{d}{s}" for d, s in zip(c["dtypes"], c["shapes"]))
    finite = "" if all(i["finite"] for i in c["inputs"]) else ", an input not finite"
    return f"{c['label']}{' of ' + shapes if shapes else ''} over {c['size']} ranks (step {c['step']}{finite})"


def _call_site(point: dict, ranks_indexed: dict, reference: dict) -> str | None:
    if point.get("call_site"):
        return point["call_site"]
    call_index = point["call_index"] if point["phase"] == "input_grad" else 0
    key = (point["step"], point["module"], call_index, "forward")
    for index in [*ranks_indexed.values(), compare.index_points(reference)]:
        if key in index and index[key].get("call_site"):
            return index[key]["call_site"]
    return None


def _encloses(outer: str, inner: str) -> bool:
    return outer != inner and (outer == "" or inner.startswith(outer + "."))


def _input_differs(inputs: dict) -> bool:
    return any(v["differs"] for v in inputs.values())


class _Builder:
    """Turns the walk's comparisons into :class:`Point` records."""

    def __init__(self, reference: dict, ranks: list[dict], reference_kind: str = "cpu", peer: bool = False):
        self.reference = reference
        self.peer = peer
        why = []
        if len(ranks) > 1:
            why.append("each rank draws its own rows' numbers from its own stream, the reference all the rows' "
                       "from one")
        # A slot's draws are the run's; the one-process slot reference is no substitute for the same ranks'.
        self.slot_hint = " (--reference slot draws as the run does)" if reference_kind == "cpu" else ""
        if reference_kind in CPU_REFERENCES:
            why.append("the run under test draws from its device's generator (a slot's, as CUDA code draws from "
                       "the GPU's), the CPU reference from the CPU's, which an initialisation on the CPU has "
                       "moved on" + self.slot_hint)
        self.data_hint = ("; a data-parallel rank's rows must be its slice of the batch the one-process "
                          "reference draws (one seeded global batch, each rank taking its rows) for the two to "
                          "mean the same" if len(ranks) > 1 else "")
        self.random_cause = ("randomness: this module call drew random numbers (dropout, a random op) and the "
                             "two runs' draws differ here" + (": " + "; ".join(why) if why else "")
                             + "; set the op's probability to 0 to compare the rest")
        self.reference_kind = reference_kind
        self.by_rank = {r["rank"]: r for r in ranks}
        self.indexed = {r["rank"]: compare.index_points(r) for r in ranks}

    def point(self, ref_point: dict, results: dict, tests: dict) -> tuple[Point, bool]:
        path, worst = max(results.items(), key=lambda kv: (kv[1]["differs"], kv[1]["max_rel_diff"]))
        rank = worst["rank"] if worst["rank"] is not None else min(tests)
        test_point = tests.get(rank, next(iter(tests.values())))
        point = Point(step=ref_point["step"], module=ref_point["module"], phase=ref_point["phase"],
                      call_index=ref_point["call_index"], max_abs_diff=worst["max_abs_diff"],
                      max_rel_diff=worst["max_rel_diff"],
                      call_site=_call_site(test_point, self.indexed, self.reference),
                      collective_before=_collective_before(self.by_rank.get(rank, {}), test_point["seq"]),
                      tensor=path, rank=worst["rank"], tolerance=worst["tolerance"], compared=worst["compared"],
                      test_max=worst["test_max"], reference_max=worst["reference_max"],
                      replica=test_point.get("replica"))
        if worst["differs"] and (ref_point.get("random") or any(p.get("random") for p in tests.values())):
            point.cause = self.random_cause
        elif worst["differs"] and worst.get("unreduced_partial"):
            point.cause = ("a partial sum never all-reduced: the ranks' values add up to the reference's, but no "
                           "rank all-reduces it next (a row-parallel layer's output, or the gradient of a "
                           "column-parallel layer's input, missing its all-reduce)")
        elif worst["differs"] and worst.get("uninitialised"):
            point.cause = ("uninitialised memory: magnitudes above 1e20 or below 1e-30 are no initialiser's; "
                           "these values were never written (to_empty or torch.empty without an initialisation)")
        elif worst["differs"] and ref_point["phase"] == "init" and not worst.get("sharded") and \
                self.reference_kind in CPU_REFERENCES and test_point.get("device_drew"):
            point.cause = ("randomness: the run drew random numbers on its device before the first step (a "
                           "parameter initialised or resized on cuda draws from the slot's generator, as on a GPU "
                           "from the GPU's), the CPU reference from the CPU's" + self.slot_hint)
        elif worst["differs"] and ref_point["phase"] == "init" and worst.get("sharded") and test_point.get(
                "drew_since_seed"):
            point.cause = ("randomness: a sharded parameter (a DTensor), and random numbers were drawn since the "
                           "last seeding, before the first step: a random initialisation of shards (DTensor's "
                           "random ops) does not draw what the reference's full tensor draws; CUDA's Philox "
                           "offsets that align them have no counterpart in the slot's generator (agreeing on "
                           f"rank(s) {worst['agreeing_ranks'] or 'none'})")
        return point, worst["differs"]


def _origin(builder: _Builder, first: tuple, walk) -> Point:
    """The first differing forward point, or, when the module was fed a differing input, the innermost module
    call enclosing it whose own input agreed (the difference arose in that module's own code, between its
    submodules), else the outermost (the script fed it a differing input)."""
    ref_point, results, inputs, tests = first
    point, _ = builder.point(ref_point, results, tests)
    if point.rank is not None and point.rank in tests:  # the input of the rank whose output differs
        inputs = compare.compare_tensors(ref_point, [(point.rank, tests[point.rank])], "inputs",
                                         peer=builder.peer)
    if ref_point["phase"] != "forward" or not _input_differs(inputs):
        return point
    seen_at, target, fed = ref_point["module"], ref_point, True
    for later in walk:
        later_point, later_results, later_inputs, later_tests = later
        if later_point["step"] != ref_point["step"]:
            break
        if later_point["phase"] != "forward" or not later_results or not _encloses(later_point["module"],
                                                                                   target["module"]):
            continue
        target, first = later_point, later
        point, _ = builder.point(later_point, later_results, later_tests)
        if point.rank is not None and point.rank in later_tests:  # the input of the rank whose output differs
            later_inputs = compare.compare_tensors(later_point, [(point.rank, later_tests[point.rank])], "inputs",
                                                   peer=builder.peer)
        fed = _input_differs(later_inputs) or (None if not later_inputs else False)
        if fed is not True:
            break
    name = repr(seen_at) if seen_at else "the model"
    if target is ref_point:
        point.cause = point.cause or (f"the module was fed an input that already differs (its input, from the "
                                      f"script's code at {point.call_site}, not from a module)")
    elif fed is None:
        point.cause = point.cause or (f"first seen at {name}'s output, whose input already differed; this "
                                      f"module's own input cannot be set against the reference's (another shape): "
                                      f"the difference arises in its code or in what it was fed (at "
                                      f"{point.call_site})")
    elif fed:
        point.cause = point.cause or (f"first seen at {name}'s output; the outermost module's input already "
                                      f"differs: the script feeds it differently (at {point.call_site})"
                                      + builder.data_hint)
    else:
        point.cause = point.cause or (f"first seen at {name}'s output, whose input already differed: the "
                                      f"difference arises in this module's own code, between its submodules")
    return point


def walk_ahead(reference: dict, ranks: list[dict], after: dict, peer: bool = False):
    """The comparisons of the points after ``after`` in the same step (a second walk: the first is not consumed)."""
    for entry in compare.walk(reference, ranks, peer):
        if entry[0]["seq"] > after["seq"] and entry[0]["step"] == after["step"]:
            yield entry


def _rescaled_later(ref_point: dict, entry: tuple, ahead) -> bool:
    """The outermost module's forward output differs, and the loss ``backward()`` is next called on in the same
    step agrees: the script rescales the model's loss before differentiating it (transformers' Trainer under
    ``nn.DataParallel`` multiplies the replicas' losses by their number), so training sees the same loss."""
    if ref_point["phase"] != "forward" or ref_point["module"] != "":
        return False
    for later, results, _, _ in ahead:
        if later["module"] == LOSS and later["phase"] == "forward":
            return bool(results) and not any(r["differs"] for r in results.values())
    return False


def build(reference: dict, ranks: list[dict], run: str, reference_name: str,
          reference_kind: str = "cpu", peer: bool = False) -> DivergeResult:
    """Walk the points (:func:`compare.walk`) to the first that differs; ``peer``: ``ranks`` is the one rank
    ``reference`` is (:func:`build_peers`)."""
    ranks = compare.by_replica(ranks)
    builder = _Builder(reference, ranks, reference_kind, peer)
    first = last = None
    compared = not_compared = 0
    random_init: list[Point] = []
    rescaled: list[Point] = []
    walk = compare.walk(reference, ranks, peer)
    for entry in walk:
        ref_point, results, inputs, tests = entry
        if not results:
            not_compared += 1
            continue
        compared += 1
        point, differs = builder.point(ref_point, results, tests)
        if differs and ref_point["phase"] == "init" and point.cause and point.cause.startswith("randomness"):
            random_init.append(point)  # one parameter's draw explains no other's: the walk goes on
            continue
        if differs and _rescaled_later(ref_point, entry, walk_ahead(reference, ranks, ref_point, peer)):
            rescaled.append(point)  # the model's loss, rescaled by the script before backward: not a divergence
            continue
        if differs:
            first = _origin(builder, entry, walk)
            break
        last = point
    if random_init and first is None:
        first = random_init[0]
    elif random_init and first.phase != "init":
        first.cause = first.cause or (f"randomness: parameters were initialised by random draws that differ "
                                      f"({', '.join(repr(p.module) for p in random_init[:4])}...)")
    steps = min([reference.get("steps", 0)] + [r.get("steps", 0) for r in ranks])
    notes = []
    if random_init and first is not random_init[0]:
        notes.append(f"{len(random_init)} parameter(s) differ at init by their random initialisation (reported, "
                     f"not counted as the first divergence): "
                     + ", ".join(f"{p.module}.{p.tensor}" for p in random_init[:6]))
    for p in rescaled:
        notes.append(f"the model's output {p.tensor!r} at step {p.step} differs (ratio "
                     f"{p.test_max / p.reference_max if p.reference_max else math.nan:.3g}) but the loss backward() "
                     f"is called on agrees: the script rescales it after the model (not counted as a divergence)")
    if not_compared:
        notes.append(f"{not_compared} point(s) recorded on both sides could not be set side by side "
                     f"(shapes that are not a slice of the reference's, or Partial DTensors)")
    return DivergeResult(diverged=first is not None, first=first, last_agreed=last, steps=steps,
                         points_compared=compared, run=run, reference=reference_name, notes=notes)


def build_peers(references: list[dict], ranks: list[dict], run: str, reference_name: str,
                reference_kind: str = "gloo") -> DivergeResult:
    """Against a reference of the same parallelism: rank r walked against the reference's rank r alone (shard
    against shard, see :mod:`interop.diverge.compare`), and the rank that differs at the earliest point reported
    (the earliest step, then the earliest in its rank's order; ties to the lower rank), with that rank's last
    agreed point. ``ValueError`` when the two runs' ranks are not the same."""
    ranks = compare.by_replica(ranks)  # the replicas inside a rank: left out, as against any reference of ranks
    by_rank = {r["rank"]: r for r in references}
    if sorted(by_rank) != sorted(r["rank"] for r in ranks):
        raise ValueError(f"the reference recorded ranks {sorted(by_rank)}, the run under test ranks "
                         f"{sorted(r['rank'] for r in ranks)}: a reference of the same parallelism needs the same")
    results = [(r["rank"], build(by_rank[r["rank"]], [r], run, reference_name, reference_kind, peer=True))
               for r in sorted(ranks, key=lambda r: r["rank"])]
    diverged = [(rank, result) for rank, result in results if result.diverged]
    rank, chosen = min(diverged, key=lambda rr: (rr[1].first.step, _order(by_rank[rr[0]], rr[1].first), rr[0])) \
        if diverged else results[0]
    notes = [f"rank {r}: {n}" for r, result in results for n in result.notes]
    return DivergeResult(diverged=chosen.diverged, first=chosen.first, last_agreed=chosen.last_agreed,
                         steps=min(result.steps for _, result in results),
                         points_compared=sum(result.points_compared for _, result in results), run=run,
                         reference=reference_name, notes=notes)


def _order(reference: dict, point: Point) -> int:
    """Where ``point`` was recorded in a rank's reference (its sequence number)."""
    found = compare.index_points(reference).get((point.step, point.module, point.call_index, point.phase))
    return found["seq"] if found else 0
