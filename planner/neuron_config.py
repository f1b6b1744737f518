"""A Neuron configuration in the step model's terms: NeuronCore degrees mapped onto chips.

NeuronX Distributed counts its degrees in ranks, one rank per (logical) NeuronCore: "DP is calculated by
dividing world size (number of nodes x NeuronCores per node) by TP x PP" (AWS, Trn1/Trn1n Training
Performance). The step model counts chips. A chip holds :func:`devices.neuron.ranks_per_chip` ranks (Trn1: 2
NeuronCore-v2; Trn2/Trn3: 8 physical cores grouped by the Logical NeuronCore setting, LNC=2 by default: 4), so

* tensor parallelism of ``tp`` ranks is ``tp / ranks_per_chip`` chips (Trn1: TP=8 is 4 chips, TP=32 is 16 chips,
  one trn1.32xlarge, inside its NeuronLink torus; Trn2 at LNC=2: TP=64 is 16 chips, one trn2.48xlarge);
* pipeline and data parallelism are unchanged (each chip's cores are consecutive tensor-parallel ranks);
* chips = nodes x chips per node = (tp / ranks_per_chip) x pp x dp;
* tensor parallelism smaller than a chip (Trn1 TP=1) puts ``ranks_per_chip / tp`` data-parallel replicas on one
  chip: modelled as one replica per chip running their microbatches together (``dp`` and ``microbatch`` scaled),
  which gives the chip's throughput but counts its weights and optimizer state once, not once per replica.

A chip's ranks run its tensor-parallel shard together: the step model prices the chip's shard of every GEMM
on the whole chip (its peak, its HBM) and its share of every collective, which is what the chip's ranks do
between them. Key/value heads replicated over more ranks than the model has (NeuronX Distributed's
``kv_replicator``) are replicated over chips the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from devices.neuron import ranks_per_chip
from planner.parallel import Parallel


@dataclass(frozen=True, slots=True, kw_only=True)
class NeuronConfig:
    """A NeuronX Distributed run's parallel degrees, in ranks (logical NeuronCores)."""

    kind: str = "trn1"
    """The Trainium kind the run is on."""
    tp: int = 1
    """Tensor-parallel degree in ranks (``--tensor_parallel_size``): a multiple of the ranks per chip, or a divisor
    of it (several replicas on one chip)."""
    pp: int = 1
    """Pipeline stages (``--pipeline_parallel_size``)."""
    dp: int | None = None
    """Data-parallel replicas (None: what the chips left over allow)."""
    lnc: int | None = None
    """Logical NeuronCore setting on Trn2/Trn3 (None: the default, 2); not accepted on Trn1."""
    zero1: bool = True
    """ZeRO-1 (``--use_zero_1``): optimizer state sharded over data parallel; False: plain data parallel."""
    microbatch: int = 1
    """Samples per microbatch (``--batch_size`` / ``MBS``)."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "microbatch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.dp is not None and (isinstance(self.dp, bool) or not isinstance(self.dp, int) or self.dp < 1):
            raise ValueError(f"dp: expected a positive integer or None, got {self.dp!r}")
        per_chip = self.ranks_per_chip
        if self.tp % per_chip and per_chip % self.tp:
            raise ValueError(f"tp: {self.tp} ranks neither fill whole {self.kind} chips of {per_chip} NeuronCore "
                             f"ranks nor divide one; accepted: multiples or divisors of {per_chip}")
        if self.dp is not None and self.dp % self.replicas_per_chip:
            raise ValueError(f"dp: {self.dp} replicas do not fill whole chips of {self.replicas_per_chip} replicas "
                             f"(tp={self.tp} on {per_chip} ranks per chip)")

    @property
    def ranks_per_chip(self) -> int:
        """Ranks (logical NeuronCores) per chip of :attr:`kind` under :attr:`lnc`."""
        return ranks_per_chip(self.kind, self.lnc)

    @property
    def tp_chips(self) -> int:
        """The tensor-parallel degree in chips (1 when several replicas share a chip)."""
        return max(1, self.tp // self.ranks_per_chip)

    @property
    def replicas_per_chip(self) -> int:
        """Data-parallel replicas one chip holds (1 unless tp is smaller than a chip's ranks)."""
        return max(1, self.ranks_per_chip // self.tp)

    def chips(self, dp: int | None = None) -> int:
        """Chips the run uses: tp chips x pp x dp / replicas per chip (``dp``: this one, else :attr:`dp`)."""
        replicas = dp if dp is not None else self.dp
        if replicas is None:
            raise ValueError("dp: give the data-parallel degree to count the chips")
        return self.tp_chips * self.pp * replicas // self.replicas_per_chip

    def parallel(self) -> Parallel:
        """The step model's configuration (degrees in chips; ZeRO-1 or plain data parallel)."""
        share = self.replicas_per_chip
        return Parallel(tp=self.tp_chips, pp=self.pp, dp=None if self.dp is None else self.dp // share,
                        zero=1 if self.zero1 else 0, microbatch=self.microbatch * share)


def neuron_parallel(kind: str = "trn1", *, tp: int, pp: int = 1, dp: int | None = None, lnc: int | None = None,
                    zero1: bool = True, microbatch: int = 1) -> Parallel:
    """The ``parallel=`` of :func:`planner.whatif` for a Neuron configuration whose degrees count NeuronCores."""
    return NeuronConfig(kind=kind, tp=tp, pp=pp, dp=dp, lnc=lnc, zero1=zero1, microbatch=microbatch).parallel()


__all__ = ["NeuronConfig", "neuron_parallel"]
