"""NCCL's Python-visible classes under the CUDA layer, served on the hybrid backend.

This torch is built without NCCL, yet under the layer ``torch.distributed.is_nccl_available()`` answers True, and
torch's own code then names ``ProcessGroupNCCL`` (``_set_pg_timeout``, ``_abort_process_group``, the
process-group uid, ``_dist2``) and reads a group's NCCL backend (``group._get_backend(torch.device("cuda"))``:
DeviceMesh, ``split_group``, ``_get_split_source``). Here they are:

- :class:`ProcessGroupNCCL` is the Gloo engine of a hybrid group created for "nccl", answering NCCL's methods; the
  group registers it for the cuda and hybrid devices too, as an NCCL group registers its backend, so torch's
  ``isinstance(backend, ProcessGroupNCCL)`` paths run on it. Its timeout is the group's
  (``_set_default_timeout`` changes the hybrid group's operations), ``options`` are the ones the group was made
  with, ``comm_split_count()`` counts the groups split from it.
- :class:`Options` and :class:`NCCLConfig` take every field NCCL's take; what NCCL would tune (stream priority,
  CTAs, the network) changes nothing the rack computes or models, so those fields are kept and recorded.
- What has no meaning on a slot is refused by name (:class:`~interop.cuda_layer.refusals.UnsupportedCudaAPI`):
  memory pools registered with NCCL, NCCL's collective-time estimator, the config's raw pointer. An ephemeral
  timeout extends the group's next operation, as NCCL's does. An ephemeral timeout extends the group's next operation, as NCCL's does.

:func:`group_options` turns an "nccl" request's options into the hybrid group's.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import weakref
from datetime import timedelta

from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import ProcessGroupGloo

import collectives.distributed as cd
from interop.cuda_layer import mapping
from interop.cuda_layer.namespace import CUDA_STACK
from interop.cuda_layer.refusals import unsupported
from interop.cuda_layer.usage import touch

NCCL_CONFIG_UNDEF_INT = -2147483648
"""NCCL's "not set" for an integer field of ``ncclConfig_t`` (``NCCL_CONFIG_UNDEF_INT``, INT_MIN)."""

CTA_POLICIES = {"NCCL_CTA_POLICY_DEFAULT": 0, "NCCL_CTA_POLICY_EFFICIENCY": 1, "NCCL_CTA_POLICY_ZERO": 2}
"""NCCL's CTA policies (``nccl.h``), as ``ProcessGroupNCCL`` exposes them."""

ENGINE_DEVICES = ("cuda", "hybrid")
"""The device types an "nccl" group's :class:`ProcessGroupNCCL` answers for besides cpu: cuda, as NCCL's does for
user code, and hybrid, the accelerator torch's own code sees under the layer (its ``split_group``, DeviceMesh)."""

REFUSED: dict[str, str] = {
    "torch.distributed.ProcessGroupNCCL.register_mem_pool":
        "nothing: slot memory comes from the slot allocator (torch.cuda.MemPool is refused too)",
    "torch.distributed.ProcessGroupNCCL.deregister_mem_pool":
        "nothing: slot memory comes from the slot allocator (torch.cuda.MemPool is refused too)",
    "torch.distributed._time_estimator":
        "collectives.estimate(...) prices a collective on the rack without running it; interop.timeline() lists "
        "the modelled time of each collective that ran",
    "torch.distributed.ProcessGroupNCCL.NCCLConfig.unsafe_get_ptr": "nothing: no ncclConfig_t exists behind a slot",
}
"""NCCL's Python APIs the layer refuses, with what to use instead."""


def _refuse(api: str):
    unsupported(api, REFUSED[api])()


class NCCLConfig:
    """``ncclConfig_t`` as torch binds it (``ProcessGroupNCCL.NCCLConfig``): every field kept; none changes what a
    slot computes or the rack models (CTAs, the network and blocking are NCCL's tuning). An unknown field raises
    AttributeError, as torch's binding does."""

    __slots__ = ("blocking", "cga_cluster_size", "min_ctas", "max_ctas", "net_name", "split_share",
                 "traffic_class", "collnet_enable", "cta_policy", "nvls_ctas")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, None if name == "net_name" else NCCL_CONFIG_UNDEF_INT)

    def unsafe_get_ptr(self) -> int:
        _refuse("torch.distributed.ProcessGroupNCCL.NCCLConfig.unsafe_get_ptr")

    def __repr__(self) -> str:
        return "NCCLConfig(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


class Options(_C10dBackend.Options):
    """``ProcessGroupNCCL.Options``: ``_timeout`` (overridden by the group's ``timeout``, as torch does),
    ``is_high_priority_stream``, ``config``, ``split_from``, ``split_color``, ``global_ranks_in_group``,
    ``group_name``. Passed as ``pg_options`` of an "nccl" group, they are that group's options (its NCCL backend's
    ``options``)."""

    def __init__(self, is_high_priority_stream: bool = False) -> None:
        super().__init__("nccl")
        self.is_high_priority_stream = bool(is_high_priority_stream)
        self.config = NCCLConfig()
        self.split_from = None
        self.split_color = 0

    def __deepcopy__(self, memo) -> "Options":
        # torch's split_group deep-copies its parent's options; the C++ base has no copy of its own.
        out = Options(self.is_high_priority_stream)
        out._timeout = self._timeout
        out.global_ranks_in_group = list(self.global_ranks_in_group)
        out.group_name = self.group_name
        for name, value in vars(self).items():
            if name != "split_from":  # a backend, shared as in NCCL
                value = copy.deepcopy(value, memo)
            setattr(out, name, value)
        return out


class ProcessGroupNCCL(ProcessGroupGloo):
    """NCCL's backend class under the layer: the Gloo engine of a hybrid group created for "nccl" (Gloo moves the
    bytes of every slot's tensors, through their host aliases), answering NCCL's Python API.

    Built directly (``ProcessGroupNCCL(store, rank, size, options)``) it is such an engine on its own: a working
    c10d backend for CPU tensors; a group for slot tensors is made with ``init_process_group("nccl")``,
    ``new_group(backend="nccl")`` or ``torch.distributed._dist2.new_group("nccl", ...)``.
    """

    NCCLConfig = NCCLConfig
    Options = Options
    NCCL_CTA_POLICY_DEFAULT = CTA_POLICIES["NCCL_CTA_POLICY_DEFAULT"]
    NCCL_CTA_POLICY_EFFICIENCY = CTA_POLICIES["NCCL_CTA_POLICY_EFFICIENCY"]
    NCCL_CTA_POLICY_ZERO = CTA_POLICIES["NCCL_CTA_POLICY_ZERO"]
    _uids = itertools.count()

    def __init__(self, store, rank: int, size: int, options: Options | None = None) -> None:
        options = Options() if options is None else options
        if not isinstance(options, Options):
            raise TypeError(f"ProcessGroupNCCL: options must be a ProcessGroupNCCL.Options, got "
                            f"{type(options).__name__}")
        super().__init__(store, rank, size, options._timeout)
        self._nccl_options = options
        self._uid = next(ProcessGroupNCCL._uids)
        self._group = None

    @classmethod
    def engine_for(cls, options: Options):
        """The hybrid group's engine factory (:attr:`collectives.distributed.Options.gloo`) for ``options``."""
        def make(store, rank: int, size: int, timeout: timedelta) -> "ProcessGroupNCCL":
            own = copy.deepcopy(options)  # each group its own, as a split's are in NCCL
            own._timeout = timeout
            return cls(store, rank, size, own)
        return make

    def bind_group(self, group) -> None:
        """Told by the hybrid group this engine serves (for :meth:`comm_split_count`)."""
        self._group = weakref.ref(group)

    # -- identity ---------------------------------------------------------------------------------------------------

    def name(self) -> str:
        return "nccl"

    @property
    def uid(self) -> int:
        """This process's number for the backend (NCCL's ``uid_``: backends in creation order)."""
        return self._uid

    @property
    def options(self) -> Options:
        """The group's NCCL options: ``_timeout`` its current timeout, ``group_name`` and ``global_ranks_in_group``
        the group's."""
        options = self._nccl_options
        options._timeout = ProcessGroupGloo.options.__get__(self)._timeout
        group = self._group() if self._group is not None else None
        if group is not None:
            options.group_name = group.group_name
            options.global_ranks_in_group = list(group.global_ranks)
        return options

    def _is_initialized(self) -> bool:
        return True

    @staticmethod
    def get_build_nccl_version(*_) -> tuple[int, int, int]:
        return tuple(CUDA_STACK["nccl"])

    get_runtime_nccl_version = get_build_nccl_version

    # -- communicators: a hybrid group connects its members on the store when it is made -------------------------

    def eager_connect_single_device(self, device) -> None:
        """Nothing left to connect: the engine connected its ranks when the group was made."""

    def perform_nocolor_split(self, device) -> None:
        """Nothing to take part in: a sub-group is made by its members alone, on the store."""

    def comm_split_count(self) -> int:
        """How many groups were split from this one's group."""
        group = self._group() if self._group is not None else None
        return group.split_count if group is not None else 0

    def _group_start(self) -> None:
        """ncclGroupStart: nothing to batch (each operation of a hybrid group is issued when called, without
        blocking its peers' order)."""

    def _group_end(self) -> None:
        """ncclGroupEnd (see :meth:`_group_start`)."""

    # -- refused by name ---------------------------------------------------------------------------------------------

    def _add_ephemeral_timeout(self, timeout) -> None:
        """The next operation of the group waits ``timeout`` longer (torch calls it for every "nccl" group while
        Inductor loads a compiled graph from its caches in a distributed job)."""
        group = self._group() if self._group is not None else None
        if group is not None:
            group.add_ephemeral_timeout(timeout)

    def register_mem_pool(self, pool, *args) -> None:
        _refuse("torch.distributed.ProcessGroupNCCL.register_mem_pool")

    def deregister_mem_pool(self, pool) -> None:
        _refuse("torch.distributed.ProcessGroupNCCL.deregister_mem_pool")

    @property
    def supports_time_estimate(self) -> bool:
        return True  # so that torch's _time_estimator reaches the refusal below, which says what to use

    def _start_time_estimate(self) -> None:
        _refuse("torch.distributed._time_estimator")

    def _end_time_estimate(self) -> float:
        _refuse("torch.distributed._time_estimator")


def rank_slot(device_id=None, *, default_group: bool = True) -> int | None:
    """The slot a rank's group owns: ``device_id``'s mapped slot; for the default group (or a standalone one)
    without it, LOCAL_RANK's mapped slot, else the current slot; for a sub-group, None (the process's slot)."""
    from collectives.torchrun_env import torchrun_env

    if device_id is not None:
        return mapping.slot_of(device_id)
    if not default_group:
        return None
    local = torchrun_env().local_rank
    if local is not None:
        return mapping.current().slot(local)
    from interop import _C

    return _C._current_slot()


def group_options(pg_options, timeout: timedelta, slot: int | None) -> cd.Options:
    """The hybrid group's options for an "nccl" request with ``pg_options`` (NCCL's Options, the hybrid
    backend's, or None): ``slot``, the request's timeout, and a :class:`ProcessGroupNCCL` engine registered for
    cuda and hybrid (:data:`ENGINE_DEVICES`)."""
    if pg_options is None or isinstance(pg_options, Options):
        if pg_options is not None:
            touch("torch.distributed.ProcessGroupNCCL.Options", "same",
                  "the group's options: its timeout is honoured; stream priority and ncclConfig are NCCL's tuning, "
                  "kept")
        nccl = Options() if pg_options is None else pg_options
        return cd.Options(slot=slot, timeout=timeout, gloo=ProcessGroupNCCL.engine_for(nccl),
                          gloo_devices=ENGINE_DEVICES)
    if isinstance(pg_options, cd.Options):
        return dataclasses.replace(pg_options, slot=slot if pg_options.slot is None else pg_options.slot,
                                   timeout=pg_options.timeout or timeout,
                                   gloo=ProcessGroupNCCL.engine_for(Options()), gloo_devices=ENGINE_DEVICES)
    raise TypeError(f"pg_options: an 'nccl' group takes torch.distributed.ProcessGroupNCCL.Options, got "
                    f"{type(pg_options).__name__}")


__all__ = ["CTA_POLICIES", "ENGINE_DEVICES", "NCCLConfig", "NCCL_CONFIG_UNDEF_INT", "Options", "ProcessGroupNCCL",
           "REFUSED", "group_options", "rank_slot"]
