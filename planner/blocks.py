"""A model as a sequence of blocks the step model can cut into pipeline stages.

:class:`ModelBlocks` is the interface the step model reads: block names, which
blocks share a shape (one trace serves them all), and a :class:`BlockProfile`
per block and :class:`Shard`. Implementations: :class:`DecoderBlocks`
(:mod:`planner.decoder_blocks`: a decoder language model built on the
meta device, as the what-if uses) and the planner's blocks of a real model
(cut with torch.export / FX). A subclass fills :meth:`signature` and
:meth:`_trace`; the base class caches one profile per signature and shard.
"""

from __future__ import annotations

from typing import Hashable

from planner.profile import BlockProfile, Shard


class ModelBlocks:
    """Blocks of one model in execution order; profiles cached per (signature, shard).

    Subclasses set :attr:`name` and :attr:`names` and implement :meth:`signature` and :meth:`_trace`.
    """

    name: str = "model"
    """The model's display name."""
    names: tuple[str, ...] = ()
    """Block names, in execution order."""
    layers: range = range(0)
    """Indices of the repeated layers (the blocks a pipeline split counts); the rest are the
    prologue (embedding) before them and the epilogue (head, loss) after them."""
    hidden_size: int = 0
    """Model width (sizes the activations handed between stages)."""
    kernels: str = "fused"
    """The kernels the profiles stand for (:mod:`planner.kernels`): ``fused`` (a production stack, priced with the
    fitted step efficiencies) or ``eager`` (the ops as written, priced op by op)."""

    def __init__(self) -> None:
        self._profiles: dict[tuple[Hashable, Shard], BlockProfile] = {}
        self._untraceable: dict[tuple[Hashable, Shard], str] = {}

    def __len__(self) -> int:
        return len(self.names)

    def signature(self, index: int) -> Hashable:
        """Blocks with equal signatures have equal profiles (one trace per distinct layer shape)."""
        raise NotImplementedError

    def check_shard(self, shard: Shard) -> None:
        """ValueError naming the dimension when ``shard`` cannot cut this model (tp not dividing heads...)."""

    def _trace(self, index: int, shard: Shard) -> BlockProfile:
        raise NotImplementedError

    def profile(self, index: int, shard: Shard) -> BlockProfile:
        """The :class:`BlockProfile` of block ``index`` cut as ``shard`` (traced once per signature)."""
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} out of range: {self.name} has {len(self)} blocks")
        try:
            key = (self.signature(index), shard)
        except (ValueError, KeyboardInterrupt, MemoryError):
            raise
        except Exception as error:  # the signature builds the model's layers
            raise self._untraced(index, None, error) from error
        found = self._profiles.get(key)
        if found is None:
            self.check_shard(shard)
            identity = self.cache_identity()
            if identity is not None:
                from planner import profile_cache

                name = profile_cache.key(identity, key[0], shard)
                found = profile_cache.load(name)
                if found is None:
                    found = self._traced(index, shard, key)
                    profile_cache.store(name, found)
            else:
                found = self._traced(index, shard, key)
            self._profiles[key] = found
        return found

    def _traced(self, index: int, shard: Shard, key: tuple) -> BlockProfile:
        """:meth:`_trace`, a family's modules that fail to build or run on the meta device (or cut as ``shard``)
        reported as a ValueError naming the block and the cut, once per signature and shard (a layout search then
        leaves that cut out: :func:`planner.search.candidates` callers skip what raises ValueError)."""
        if key in self._untraceable:
            raise ValueError(self._untraceable[key])
        try:
            return self._trace(index, shard)
        except (ValueError, KeyboardInterrupt, MemoryError):
            raise
        except Exception as error:
            refusal = self._untraced(index, shard, error)
            self._untraceable[key] = str(refusal)
            raise refusal from error

    def _untraced(self, index: int, shard: Shard | None, error: Exception) -> ValueError:
        """The ValueError for block ``index`` failing to build or trace cut as ``shard`` (None: uncut)."""
        cut = {f: getattr(shard, f) for f in ("tp", "cp", "ep") if getattr(shard, f, 1) > 1} if shard else {}
        what = (f"cannot be traced cut as {', '.join(f'{f}={v}' for f, v in cut.items())} (its family's modules "
                f"do not take the tensor-parallel cut the what-if applies; a layout without it may)" if cut
                else "does not build or run on the meta device (its family is not one the what-if traces)")
        return ValueError(f"{'parallel' if cut else 'model'}: {self.name}'s block {self.names[index]} {what}: "
                          f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")

    def chunk_collectives(self, chunk: range, shard: Shard) -> tuple:
        """Collectives a stage running the blocks ``chunk`` cut as ``shard`` issues per microbatch besides its
        blocks' own (:class:`~planner.profile.Collective`; the first block's forward and the last
        block's backward carry them). None here; the planner's exported blocks broadcast a tensor-parallel
        stage's inputs over its slots and its output gradients back."""
        return ()

    def cache_identity(self) -> str | None:
        """A string naming everything the profiles depend on besides signature and shard, for the on-disk
        cache (:mod:`planner.profile_cache`); None (the default) keeps profiles in memory only."""
        return None

    def distinct(self) -> dict[Hashable, list[int]]:
        """Signature -> the block indices sharing it, in order of first appearance."""
        out: dict[Hashable, list[int]] = {}
        for i in range(len(self)):
            out.setdefault(self.signature(i), []).append(i)
        return out

    def parameters(self) -> int:
        """Parameter elements of the whole model (unsharded)."""
        shard = Shard(seq_len=self.probe_seq_len)
        return sum(self.profile(i, shard).params for i in range(len(self)))

    probe_seq_len: int = 128
    """A short sequence for shape-independent questions (parameter counts)."""


__all__ = ["ModelBlocks"]
