"""A schedule compiled for execution in one process: every output region as one expression of the inputs.

Across processes a schedule's rounds must run one after another: a rank can only add what a peer has sent.
In one process every participant's memory is at hand, so the data the rounds would move can be read where
it already lies.  :func:`compile_schedule` runs the schedule symbolically, over regions instead of
elements: each region of each buffer holds an expression (leaves: regions of the inputs as they were before
the call; inner nodes: the reduce op applied to two operands, left before right), and a transfer
rewrites the expressions of the regions it writes exactly as the step-by-step executor would combine the
values (the same operands, the same order, the same association).  What is left in the output buffers at
the end is a :class:`Program`: steps, each ``count`` elements of one expression written to every output
region that holds it.  Running a program reads every input element it needs once and writes every output
element once: one pass per chunk instead of one per round, nothing allocated, and the memory traffic of
the collective is all it costs.  The result is bit for bit the step-by-step result, because every element
meets the same operations in the same order.

A program's semantics: every leaf reads the value its buffer held before the call (the executor keeps a copy
of an input that in-place use would overwrite before it is read, see :func:`hazards`).

Pure Python: importing this module never imports torch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Sequence

from collectives.schedule import Schedule, inplace_safe

OP = -1
"""In a step's code: combine the two values on top of the stack (the deeper one is the left operand)."""
MAX_LEAVES_PER_PARTICIPANT = 4
"""A step whose expression has more leaves than this many per participant is not fused (the schedule would
read some input more than a few times; the step-by-step executor runs it)."""


@dataclass(frozen=True, slots=True)
class Step:
    """``count`` elements of one expression, written to every destination."""

    count: int
    """Elements."""
    code: tuple[int, ...]
    """Postfix: ``k >= 0`` pushes leaf ``k``; :data:`OP` pops right then left and pushes ``left (op) right``."""
    leaves: tuple[tuple[str, int, int], ...]
    """(buffer ``"in"`` or ``"out"``, participant, element offset of the step's first element)."""
    dsts: tuple[tuple[int, int], ...]
    """(participant, element offset in its ``out`` buffer)."""
    identity: bool = False
    """The value is what the one destination already holds (an output region the schedule never wrote, or an
    input copied onto itself in place): nothing to do unless a final scaling (avg, premul_sum) applies."""


@dataclass(frozen=True, slots=True)
class Program:
    """A compiled schedule: steps that together write every output element the schedule writes."""

    steps: tuple[Step, ...]
    depth: int
    """The most intermediate (computed) values alive at once while evaluating one step."""
    reads_out: bool
    """Some leaf reads what an ``out`` buffer held before the call."""
    reduces: bool
    """Some step combines values (else the program only moves data)."""

    @property
    def elements(self) -> int:
        """Output elements written."""
        return sum(s.count * len(s.dsts) for s in self.steps)


class _Nodes:
    """Hash-consed expression nodes: ``("leaf", buffer, participant, delta)`` or ``("op", left, right)``.

    A node is evaluated at a position x of the memory it is stored in: a leaf reads element ``x + delta`` of
    the participant's buffer as it was before the call; an op combines its operands at the same x.
    """

    __slots__ = ("ids", "nodes", "_shifted")

    def __init__(self) -> None:
        self.ids: dict[tuple, int] = {}
        self.nodes: list[tuple] = []
        self._shifted: dict[tuple[int, int], int] = {}

    def make(self, node: tuple) -> int:
        found = self.ids.get(node)
        if found is None:
            found = self.ids[node] = len(self.nodes)
            self.nodes.append(node)
        return found

    def shift(self, node: int, delta: int) -> int:
        """The node whose value at x is ``node``'s value at ``x + delta``."""
        if delta == 0:
            return node
        key = (node, delta)
        found = self._shifted.get(key)
        if found is None:
            n = self.nodes[node]
            if n[0] == "leaf":
                found = self.make(("leaf", n[1], n[2], n[3] + delta))
            else:
                found = self.make(("op", self.shift(n[1], delta), self.shift(n[2], delta)))
            self._shifted[key] = found
        return found


class _Memory:
    """One participant's address space of one buffer (or of ``in`` and ``out`` together when in place):
    sorted, non-overlapping segments ``[lo, hi)`` each holding one node."""

    __slots__ = ("starts", "segs")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.segs: list[tuple[int, int, int]] = []

    def read(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """The segments covering ``[lo, hi)``, clipped to it; None for an uncovered part."""
        out = []
        k = max(0, bisect.bisect_right(self.starts, lo) - 1)
        pos = lo
        while pos < hi:
            if k < len(self.segs) and self.segs[k][0] <= pos < self.segs[k][1]:
                a, b, node = self.segs[k]
                end = min(b, hi)
                out.append((pos, end, node))
                pos = end
                k += 1
            elif k < len(self.segs) and self.segs[k][1] <= pos:
                k += 1
            else:
                nxt = self.segs[k][0] if k < len(self.segs) else hi
                end = min(nxt, hi)
                out.append((pos, end, None))
                pos = end
        return out

    def write(self, lo: int, hi: int, pieces: list[tuple[int, int, int | None]]) -> None:
        """Replace ``[lo, hi)`` by ``pieces`` (which tile it)."""
        k0 = max(0, bisect.bisect_right(self.starts, lo) - 1)
        keep_before, keep_after, k1 = [], [], k0
        while k1 < len(self.segs) and self.segs[k1][0] < hi:
            a, b, node = self.segs[k1]
            if b <= lo:
                keep_before.append((a, b, node))
            else:
                if a < lo:
                    keep_before.append((a, lo, node))
                if b > hi:
                    keep_after.append((hi, b, node))
            k1 += 1
        new = keep_before + [p for p in pieces if p[2] is not None] + keep_after
        self.segs[k0:k1] = new
        self.starts[k0:k1] = [s[0] for s in new]


def compile_schedule(schedule: Schedule, alias: Sequence[tuple[int, int] | None] | None = None) -> Program | None:
    """The :class:`Program` that gives the step-by-step result of ``schedule``.

    ``alias[i] = (in_base, out_base)`` when participant i's input and output share memory the NCCL way (as
    ``collectives.executor.validate`` returns it) and the step-by-step executor would run on the shared
    memory; pass None for participants whose inputs it would copy first (``executor.effective_alias``).
    Which operand comes first where an operand is stored where the result goes follows from that sharing.
    None when the fused form does not apply: the result would depend on scratch memory the schedule
    reads before writing it, or an expression would read the inputs too many times.
    """
    p = schedule.participants
    alias = list(alias) if alias is not None else [None] * p
    sizes = schedule.buffers
    nodes = _Nodes()
    spaces: dict[tuple[str, int], _Memory] = {}

    def where(buf: str, rank: int) -> tuple[tuple[str, int], int]:
        """(memory key, base position) of ``buf`` of ``rank``."""
        if buf in ("in", "out") and alias[rank] is not None:
            return ("io", rank), alias[rank][0 if buf == "in" else 1]
        return (buf, rank), 0

    for buf, per_rank in sizes.items():
        for rank, n in enumerate(per_rank):
            if not n:
                continue
            key, base = where(buf, rank)
            mem = spaces.setdefault(key, _Memory())
            if buf == "out" and key[0] == "io":
                continue  # filled below, after the input it surrounds
            mem.write(base, base + n, [(base, base + n, nodes.make(("leaf", buf, rank, -base)))])
    for rank in range(p):
        if alias[rank] is None or not sizes.get("out", (0,) * p)[rank]:
            continue
        mem = spaces[("io", rank)]
        ob = alias[rank][1]
        n = sizes["out"][rank]
        leaf = nodes.make(("leaf", "out", rank, -ob))
        pieces = [(a, b, node if node is not None else leaf) for a, b, node in mem.read(ob, ob + n)]
        mem.write(ob, ob + n, pieces)

    def region(buf: str, rank: int, off: int, n: int):
        key, base = where(buf, rank)
        return key, base + off, base + off + n

    def operand(buf: str, rank: int, off: int, n: int, dst_pos: int) -> list[tuple[int, int, int | None]]:
        """The pieces of a region, positions relative to the transfer (0..n), nodes in the destination's frame."""
        key, lo, hi = region(buf, rank, off, n)
        mem = spaces.get(key)
        if mem is None:
            return [(0, n, None)]
        return [(a - lo, b - lo, None if node is None else nodes.shift(node, lo - dst_pos))
                for a, b, node in mem.read(lo, hi)]

    for rnd in schedule.rounds:
        for t in rnd:
            n = t.count
            if n == 0:
                continue
            for d in t.dsts:
                dkey, dlo, dhi = region(t.dst_buf, d, t.dst_off, n)
                if not t.reduce:
                    parts = operand(t.src_buf, t.srcs[0], t.src_off, n, dlo)
                else:
                    regions = [(t.src_buf, s, t.src_off) for s in t.srcs]
                    if t.acc_buf is not None:
                        regions.insert(0, (t.acc_buf, d, t.acc_off))
                    elif len(t.srcs) == 1:
                        regions.insert(0, (t.dst_buf, d, t.dst_off))
                    # An operand stored where the result goes is read first (the step-by-step executor
                    # compares data pointers).
                    for k, (buf, rank, off) in enumerate(regions):
                        key, lo, _ = region(buf, rank, off, n)
                        if key == dkey and lo == dlo:
                            regions.insert(0, regions.pop(k))
                            break
                    parts = _fold(nodes, [operand(buf, rank, off, n, dlo) for buf, rank, off in regions])
                spaces.setdefault(dkey, _Memory()).write(dlo, dhi, [(dlo + a, dlo + b, node) for a, b, node in parts])
    return _program(schedule, nodes, spaces, where)


def _fold(nodes: _Nodes, operands: list[list[tuple[int, int, int | None]]]) -> list[tuple[int, int, int | None]]:
    """Left fold of the operands with the reduce op, piece by piece."""
    cuts = sorted({c for parts in operands for a, b, _ in parts for c in (a, b)})
    out = []
    idx = [0] * len(operands)
    for a, b in zip(cuts, cuts[1:]):
        value = None
        for k, parts in enumerate(operands):
            while parts[idx[k]][1] <= a:
                idx[k] += 1
            node = parts[idx[k]][2]
            if node is None:
                value = None
                break
            value = node if k == 0 else nodes.make(("op", value, node))
        if value is None:
            out.append((a, b, None))  # reads memory nothing wrote: not fusable (caught at the end)
        else:
            out.append((a, b, value))
    return _merge(out)


def _merge(pieces):
    out = []
    for a, b, node in pieces:
        if out and out[-1][2] == node and out[-1][1] == a and node is not None:
            out[-1] = (out[-1][0], b, node)
        else:
            out.append((a, b, node))
    return out


def _program(schedule: Schedule, nodes: _Nodes, spaces, where) -> Program | None:
    p = schedule.participants
    outs = schedule.buffers.get("out", (0,) * p)
    limit = MAX_LEAVES_PER_PARTICIPANT * p + 4
    order: dict[tuple, int] = {}
    dsts: list[list[tuple[int, int]]] = []
    for rank in range(p):
        n = outs[rank]
        if not n:
            continue
        key, base = where("out", rank)
        mem = spaces.get(key)
        if mem is None:
            return None
        for a, b, node in mem.read(base, base + n):
            if node is None:
                return None
            canonical = nodes.shift(node, a)  # value at j = node at a + j
            leaf = nodes.nodes[canonical]
            # A leaf stored where it was read from (where(leaf) == (key, a)): the region already holds it.
            same = leaf[0] == "leaf" and where(leaf[1], leaf[2])[0] == key and where(leaf[1], leaf[2])[1] + leaf[3] == a
            group = ("identity", rank, a) if same else (canonical, b - a)
            if group not in order:
                order[group] = len(dsts)
                dsts.append([(canonical, b - a)])
            dsts[order[group]].append((rank, a - base))
    steps = []
    depth = 0
    reads_out = reduces = False
    for group, k in sorted(order.items(), key=lambda kv: kv[1]):
        (node, count), targets = dsts[k][0], dsts[k][1:]
        code, leaves, need = _postfix(nodes, node, limit)
        if code is None:
            return None
        for buf, rank, off in leaves:
            if buf not in ("in", "out"):
                return None  # scratch read before it was written
            if buf == "out":
                reads_out = True
        reduces = reduces or OP in code
        depth = max(depth, need)
        steps.append(Step(count, code, leaves, tuple(targets), group[0] == "identity"))
    return Program(tuple(steps), depth, reads_out, reduces)


def _postfix(nodes: _Nodes, root: int, limit: int):
    """(code, leaves, intermediate values needed) of an expression; (None, ...) past ``limit`` leaves."""
    code: list[int] = []
    leaves: list[tuple[str, int, int]] = []
    index: dict[tuple[str, int, int], int] = {}
    # Iterative post-order walk; each entry: (node, expanded?)
    work = [(root, False)]
    computed = 0  # values on the evaluation stack that are computed (not leaves)
    kinds: list[bool] = []  # stack of "is computed"
    need = 0
    while work:
        if len(code) > 2 * limit:
            return None, leaves, 0
        node, expanded = work.pop()
        n = nodes.nodes[node]
        if n[0] == "leaf":
            leaf = (n[1], n[2], n[3])
            k = index.get(leaf)
            if k is None:
                if len(leaves) >= limit:
                    return None, leaves, 0
                k = index[leaf] = len(leaves)
                leaves.append(leaf)
            code.append(k)
            kinds.append(False)
        elif expanded:
            code.append(OP)
            right, left = kinds.pop(), kinds.pop()
            computed -= int(right) + int(left)
            # The result reuses a computed operand's storage, else takes a new one.
            kinds.append(True)
            computed += 1
            need = max(need, computed)
        else:
            work.append((node, True))
            work.append((n[2], False))
            work.append((n[1], False))
    return tuple(code), tuple(leaves), need


def effective_alias(schedule: Schedule, alias: Sequence[tuple[int, int] | None], widened: bool) -> tuple:
    """The sharing the step-by-step executor computes with: none when it copies the inputs first (narrow
    floats widened to float32, or in-place use the schedule is not safe for)."""
    if widened or not any(a is not None for a in alias) or not inplace_safe(schedule, alias):
        return (None,) * len(alias)
    return tuple(alias)


def hazards(program: Program, alias: Sequence[tuple[int, int] | None], *,
            scaled: bool = False) -> frozenset[tuple[str, int]]:
    """The buffers (``("in" | "out", participant)``) a program must read from a copy.

    ``alias``: the memory participants' inputs and outputs really share (``executor.validate``).  A leaf
    reads the value from before the call, so a buffer is a hazard when a step writes memory that a step
    (another one, or the same one at another element) reads; reading an element and then writing the same
    element in one pass is safe.  ``scaled``: a final scaling applies, so identity steps run too.
    """
    steps = [(k, s) for k, s in enumerate(program.steps) if scaled or not s.identity]

    def place(buf: str, rank: int, off: int) -> tuple[tuple[str, int], int]:
        if alias[rank] is not None:
            return ("io", rank), alias[rank][0 if buf == "in" else 1] + off
        return (buf, rank), off

    writes: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for k, step in steps:
        for rank, off in step.dsts:
            space, lo = place("out", rank, off)
            writes.setdefault(space, []).append((lo, lo + step.count, k))
    bad = set()
    for k, step in steps:
        for buf, rank, off in step.leaves:
            space, lo = place(buf, rank, off)
            hi = lo + step.count
            for wlo, whi, wk in writes.get(space, ()):
                if whi <= lo or hi <= wlo or (wk == k and wlo == lo):
                    continue
                bad.add((buf, rank))
    return frozenset(bad)
