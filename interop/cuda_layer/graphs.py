"""CUDA graphs on the rack: ``torch.cuda.CUDAGraph``, ``torch.cuda.graph`` and ``graph_pool_handle``.

Capture on a GPU records the kernels a block launches without running them; replay reruns them on the same
memory. Here capture records the block's ATen ops on slot tensors without running them either: each op's
outputs are allocated on the slot, uninitialised, with the shapes and strides its meta kernel gives (an op
writing an argument in place has that argument as its output), and views are made at once (they launch
nothing). Replay runs the recorded ops in order on the same tensors and writes each result into the
output captured for it, so the tensors the script kept (static inputs, outputs, saved activations) hold the
replay's values, as on a GPU. Random ops draw anew at each replay, as a graph advances its Philox offset.

Collectives of the ``hybrid`` group (what ``nccl`` is under the layer) are recorded too, through
:mod:`collectives.graph_capture`: the capture runs none of them and each replay issues them again in
order, as a GPU graph replays NCCL's kernels. A graph compiled by ``torch.compile`` on a slot runs past the
dispatcher too (Inductor's kernels): the capture runs it once to allocate its outputs and each replay runs it
again into them; Dynamo compiles inside a capture as outside it (the recording mode steps aside while it does). Storage resizes of slot tensors inside the block (FSDP2 frees an unsharded parameter with
``untyped_storage().resize_(0)`` after its use and allocates it again before the next all-gather) are not ATen
ops, but they are part of what the block does to memory: a GPU graph keeps those allocations in its private
pool at the addresses the capture saw. Here they are recorded in order with the ops and redone at replay, so
each replayed op finds its tensors' storage as the capture did (an op replayed into a storage freed since
would write through a null pointer).

What a GPU refuses during capture is refused here too: reading a value to the host (``.item()``, an op
whose output shape depends on its data). Host tensors' ops inside the block run at once, not recorded.
Replay is placed on the modelled timeline op by op, as eager launches would be (the launch overhead a
graph saves is not modelled); the write into the captured outputs is the emulation's, off the timeline.
"""

from __future__ import annotations

import torch
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from collectives import graph_capture
from interop.cuda_layer.usage import touch

_aten = torch.ops.aten
# Ops that only allocate: they run at capture (the graph's pool would hold their memory) and not at replay.
_ALLOCATIONS = {_aten.empty.memory_format, _aten.empty_strided.default, _aten.empty_like.default,
                _aten.new_empty.default, _aten.new_empty_strided.default}
# Reads of a value to the host: a capturing GPU stream refuses them.
_HOST_READS = {_aten._local_scalar_dense.default, _aten.item.default, _aten.nonzero.default,
               _aten.masked_select.default, _aten.unique_consecutive.default, _aten._unique2.default}


_PLAIN = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)


def _on_slot(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "hybrid"


class _Recording(TorchDispatchMode):
    """Records a capture's ops on slot tensors (see the module doc)."""

    supports_higher_order_operators = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Dynamo compiles as without a capture (it would otherwise run a compiled function eagerly, and refuse a
        # fullgraph one); the compiled graph's call is recorded whole (collectives.graph_capture).
        return True

    def __init__(self, graph: "CUDAGraph"):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, FakeTensor) for t in types):
            return func(*args, **kwargs)  # shape propagation (DTensor's): no memory, nothing a graph holds
        if any(t not in _PLAIN for t in types):
            # A tensor subclass (DTensor, a wrapper) dispatches first and calls back with its plain tensors: a GPU
            # graph holds the kernels those run, never the subclass's own op on its global shape.
            return NotImplemented
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        device = next((v.device for v in flat if _on_slot(v)), None)
        if device is None and isinstance(kwargs.get("device"), torch.device) and kwargs["device"].type == "hybrid":
            device = kwargs["device"]
        if device is None or (not isinstance(func, HigherOrderOperator) and (func in _ALLOCATIONS or _is_view(func))):
            return func(*args, **kwargs)
        if isinstance(func, HigherOrderOperator):
            # A higher-order op (FlexAttention's forward and backward on a slot) has no meta kernel to shape its
            # outputs: the capture runs it once to allocate them (on the capture's unwritten inputs: the values are
            # the replay's to give), and each replay runs it again and writes into them.
            # It runs whole at each replay: what it calls is not recorded apart (a compiled region's graph, in
            # inductor_compiled_code). Its argument lists are copied, as a compiled graph's call empties them.
            args, kwargs = tree_map(_same, (args, kwargs))
            self.graph._ops.append((func, args, kwargs, None))
            record = graph_capture.recorder()
            graph_capture.set_recorder(None)
            try:
                inputs = [v for v in tree_flatten((args, kwargs))[0] if isinstance(v, torch.Tensor)]
                outputs = graph_capture.without_side_effects(inputs, lambda: func(*tree_map(_same, args), **kwargs))
            finally:
                graph_capture.set_recorder(record)
            self.graph._ops[-1] = (func, args, kwargs, outputs)
            return outputs
        if func in _HOST_READS:
            raise RuntimeError(f"{func.name()} during CUDA graph capture: it reads a value to the host, which a "
                               "capturing stream does not allow (on a GPU: 'operation not permitted when stream "
                               "is capturing'). Do it before the capture, or outside the graph")
        outputs = self._outputs(func, args, kwargs, device)
        self.graph._ops.append((func, args, kwargs, outputs))
        return outputs

    @staticmethod
    def _outputs(func, args, kwargs, device):
        def as_meta(v):
            if isinstance(v, torch.Tensor):
                return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            if isinstance(v, torch.device) and v.type == "hybrid":
                return torch.device("meta")
            return v
        try:
            shaped = func(*tree_map(as_meta, args), **tree_map(as_meta, kwargs))
        except Exception as error:  # noqa: BLE001  (no shape function, or a shape that depends on the data)
            raise RuntimeError(f"{func.name()} cannot be captured in a CUDA graph on the rack: its outputs' shapes "
                               f"are not known without running it ({type(error).__name__}: {error}). Run it "
                               "outside the graph") from error
        written = _written_arguments(func, args, kwargs)

        def allocate(index, meta):
            if not isinstance(meta, torch.Tensor):
                return meta
            if index in written:
                return written[index]
            return torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype, device=device)

        if isinstance(shaped, (tuple, list)):
            return type(shaped)(allocate(i, m) for i, m in enumerate(shaped))
        return allocate(0, shaped)


def _same(value):
    return value


def _is_view(func) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _written_arguments(func, args, kwargs) -> dict:
    """Return index -> the argument an in-place or ``out=`` op returns as that output."""
    schema = func._schema
    by_set = {}
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
        for alias_set in info.before_set:
            by_set[alias_set] = value
    written = {}
    for index, returned in enumerate(schema.returns):
        info = returned.alias_info
        if info is not None and info.is_write:
            for alias_set in info.before_set:
                if alias_set in by_set:
                    written[index] = by_set[alias_set]
    return written


_storage_resize = torch.UntypedStorage.resize_


def _resize_storage(storage, nbytes):
    """``UntypedStorage.resize_`` while a graph captures: a slot storage's resize is recorded in the graph too."""
    graph = CUDAGraph._capturing
    if graph is not None and storage.device.type == "hybrid":
        graph._ops.append((_storage_resize, (storage, nbytes), {}, None))
    return _storage_resize(storage, nbytes)


class CUDAGraph:
    """``torch.cuda.CUDAGraph`` on the rack: capture records, replay reruns (see the module doc)."""

    _capturing: "CUDAGraph | None" = None

    def __init__(self, keep_graph: bool = False):
        touch("torch.cuda.CUDAGraph", "modelled", "capture records the ops on slot tensors; replay reruns them")
        self._ops: list = []
        self._mode: _Recording | None = None

    def capture_begin(self, pool=None, capture_error_mode: str = "global", check_input_liveness: bool = False):
        if CUDAGraph._capturing is not None:
            raise RuntimeError("a CUDA graph capture is already underway: one capture at a time in a process")
        self._ops.clear()
        self._mode = _Recording(self)
        self._mode.__enter__()
        CUDAGraph._capturing = self
        torch.UntypedStorage.resize_ = _resize_storage
        graph_capture.set_recorder(self._record_call)

    def capture_end(self) -> None:
        if CUDAGraph._capturing is not self or self._mode is None:
            raise RuntimeError("capture_end() without capture_begin() on this graph")
        self._mode.__exit__(None, None, None)
        self._mode = None
        CUDAGraph._capturing = None
        torch.UntypedStorage.resize_ = _storage_resize
        graph_capture.set_recorder(None)

    def _record_call(self, func, args, kwargs, outputs) -> None:
        self._ops.append((func, args, kwargs, outputs))

    def instantiate(self) -> None:
        return None

    def replay(self) -> None:
        if self._mode is not None:
            raise RuntimeError("replay() during this graph's own capture")
        from interop import _C

        # Below autograd, as a graph's kernels run: no autograd checks or version bumps on the captured tensors.
        with torch._C._AutoDispatchBelowADInplaceOrView():
            for func, args, kwargs, outputs in self._ops:
                if isinstance(func, HigherOrderOperator):
                    args = tree_map(_same, args)  # fresh argument lists, which a compiled graph's call empties
                result = func(*args, **kwargs)
                if getattr(func, "namespace", None) in _FUNCTIONAL_COLLECTIVES:
                    result = tree_map(_wait_tensor, result)
                recording = _C._timeline_enabled()
                _C._set_timeline_enabled(False)
                try:
                    _write_into(outputs, result)
                finally:
                    _C._set_timeline_enabled(recording)

    def reset(self) -> None:
        self._ops.clear()

    def pool(self) -> tuple[int, int]:
        return (id(self), 0)

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        with open(debug_path, "w", encoding="utf-8") as f:
            for func, *_ in self._ops:
                f.write(f"{func.name() if hasattr(func, 'name') else getattr(func, '__qualname__', func)}\n")


_FUNCTIONAL_COLLECTIVES = ("_c10d_functional", "c10d_functional")


def _wait_tensor(value):
    """A functional collective's output is complete only after its wait (DTensor's redistributions call one
    later, which the capture ran at once as it launches nothing); the replay's copy into the captured output
    reads it, so it waits first."""
    if isinstance(value, torch.Tensor):
        return torch.ops._c10d_functional.wait_tensor(value)
    return value


def _write_into(captured, result) -> None:
    """Copy a replayed op's result into the tensors captured as its outputs."""
    pairs = list(zip(captured, result)) if isinstance(captured, (tuple, list)) else [(captured, result)]
    for out, value in pairs:
        if isinstance(out, torch.Tensor) and isinstance(value, torch.Tensor) and out is not value:
            out.copy_(value)


def is_current_stream_capturing() -> bool:
    return CUDAGraph._capturing is not None


def graph_pool_handle() -> tuple[int, int]:
    return (0, 0)


class graph:
    """``torch.cuda.graph(cuda_graph, pool=None, stream=None, ...)``: capture the block into ``cuda_graph`` on a
    side stream, as torch's context manager does."""

    default_capture_stream = None

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None, capture_error_mode: str = "global",
                 enable_annotations: bool = False, check_input_liveness: bool = False):
        touch("torch.cuda.graph", "modelled", "captures the block into the CUDAGraph (recorded, then replayed)")
        if stream is None and graph.default_capture_stream is None:
            graph.default_capture_stream = torch.cuda.Stream()
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = torch.cuda.stream(self.capture_stream)
        self.cuda_graph = cuda_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        torch.cuda.synchronize()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc) -> None:
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(*exc)
