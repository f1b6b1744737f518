"""What an interpreted Triton launch does, counted while it runs.

Triton's interpreter executes every memory access and matrix product through
one module-level builder; for the duration of a launch its methods are shadowed
by counting ones (:class:`Counting`): each active lane of a load, store or
atomic (atomics read and write) at the element size of its pointer type, and
2*M*N*K per ``tl.dot``. The same shadows check each access against the launch's
allocations first (:mod:`interop.compile.triton_bounds`). This is what the kernel asks of memory, with no cache
between it and HBM: a tiled matmul's re-reads are counted each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

COUNTED_METHOD = ("bytes and FLOPs counted while the kernel ran in Triton's interpreter: each active lane of every "
                  "load, store and atomic (element size of its pointer type; atomics read and write), 2*M*N*K per "
                  "tl.dot; what the kernel asks for, with no cache between it and HBM")

# Triton element types -> the torch dtype names the cost model takes.
_DTYPES = {
    "fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64", "fp8e4nv": "float8_e4m3fn",
    "fp8e5": "float8_e5m2", "fp8e4b8": "float8_e4m3fnuz", "fp8e5b16": "float8_e5m2fnuz", "int1": "bool",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8", "uint16": "uint16",
    "uint32": "uint32", "uint64": "uint64",
}


@dataclass
class LaunchCounter:
    """What one interpreted launch did."""

    bytes: float = 0.0
    dot_flops: float = 0.0
    dot_outputs: float = 0.0
    """Per program, the largest tl.dot output tile, summed over programs (the equivalent GEMM's output)."""
    grid: tuple = ()
    bytes_by_dtype: dict = field(default_factory=dict)
    dot_dtype: str | None = None
    _program_tile: float = 0.0

    def moved(self, count: int, element_type) -> None:
        name = _DTYPES.get(element_type.name, "float32")
        nbytes = count * max(1, element_type.primitive_bitwidth // 8)
        self.bytes += nbytes
        self.bytes_by_dtype[name] = self.bytes_by_dtype.get(name, 0) + nbytes

    def next_program(self) -> None:
        self.dot_outputs += self._program_tile
        self._program_tile = 0.0

    @property
    def dtype(self) -> str:
        """The dtype a launch is priced in: its matrix products' operands', else the dtype that moved most bytes."""
        if self.dot_dtype is not None:
            return self.dot_dtype
        if not self.bytes_by_dtype:
            return "float32"
        return max(self.bytes_by_dtype, key=self.bytes_by_dtype.get)


def _element_type(handle):
    return handle.get_element_ty()


def _element_bytes(handle) -> int:
    return max(1, _element_type(handle).primitive_bitwidth // 8)


class Counting:
    """Counts the interpreter builder's memory traffic and dot FLOPs while a launch runs.

    The interpreter has one module-level builder; its methods are shadowed by
    counting ones on the instance for the launch and removed afterwards.
    """

    NAMES = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas", "create_dot",
             "set_grid_dim", "set_grid_idx")

    def __init__(self, builder, counter: LaunchCounter, bounds=None):
        self.builder, self.counter, self.bounds = builder, counter, bounds

    def __enter__(self):
        b, c = self.builder, self.counter
        load, store = b.create_masked_load, b.create_masked_store
        rmw, cas, dot = b.create_atomic_rmw, b.create_atomic_cas, b.create_dot
        set_dim, set_idx = b.set_grid_dim, b.set_grid_idx
        bounds = self.bounds  # interop.compile.triton_bounds.Bounds: every access checked before it is made

        def check(what, ptrs, mask):
            if bounds is not None:
                bounds.check(what, ptrs.data, None if mask is None else mask.data, _element_bytes(ptrs))

        def create_masked_load(ptrs, mask, other, cache_policy, is_volatile):
            check("loads from", ptrs, mask)
            c.moved(int(np.count_nonzero(mask.data)), _element_type(ptrs))
            return load(ptrs, mask, other, cache_policy, is_volatile)

        def create_masked_store(ptrs, value, mask, cache_policy):
            check("stores to", ptrs, mask)
            c.moved(int(np.count_nonzero(mask.data)), _element_type(ptrs))
            return store(ptrs, value, mask, cache_policy)

        def create_atomic_rmw(rmw_op, ptr, val, mask, sem, scope):
            check("atomically updates", ptr, mask)
            c.moved(2 * int(np.count_nonzero(mask.data)), _element_type(ptr))
            return rmw(rmw_op, ptr, val, mask, sem, scope)

        def create_atomic_cas(ptr, cmp, val, sem, scope):
            check("compares and swaps at", ptr, None)
            c.moved(2 * int(np.size(ptr.data)), _element_type(ptr))
            return cas(ptr, cmp, val, sem, scope)

        def create_dot(a, b_, d, input_precision, max_num_imprecise_acc):
            m, k = a.data.shape[-2:]
            n = b_.data.shape[-1]
            batch = int(np.prod(a.data.shape[:-2])) if a.data.ndim > 2 else 1
            c.dot_flops += 2.0 * batch * m * n * k
            c._program_tile = max(c._program_tile, float(batch * m * n))
            if c.dot_dtype is None:
                c.dot_dtype = _DTYPES.get(a.dtype.scalar.name, "float32")
            return dot(a, b_, d, input_precision, max_num_imprecise_acc)

        def set_grid_dim(x, y, z):
            c.grid = tuple(int(v) for v in (x, y, z))
            return set_dim(x, y, z)

        def set_grid_idx(x, y, z):
            c.next_program()
            return set_idx(x, y, z)

        for name, fn in zip(self.NAMES, (create_masked_load, create_masked_store, create_atomic_rmw,
                                         create_atomic_cas, create_dot, set_grid_dim, set_grid_idx)):
            setattr(b, name, fn)
        return self

    def __exit__(self, *exc):
        for name in self.NAMES:
            self.builder.__dict__.pop(name, None)
        self.counter.next_program()
        return False
