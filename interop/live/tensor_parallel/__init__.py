"""Tensor parallelism of a block's linear layers (Megatron's column/row pairs), found in its exported graph.

A block cut with torch.export is an fx graph whose linear layers are ``aten.linear`` calls on
its own parameters. :func:`analyse` finds the pairs tensor parallelism cuts: a *column-parallel*
linear (its weight split by output features over ``tp`` slots) whose output flows, through
element-wise ops, splits, views into heads, transposes and attention, into a *row-parallel*
linear (its weight split by input features), whose partial results are summed over the slots:
an all_reduce in forward, and the column's input gradient all-reduced in backward (Megatron-LM
without sequence parallelism). Everything else in the block runs whole on every slot. A region
that meets an op it cannot split (its value leaves the block, a reduction over the split
dimension, ...) stays whole.

Four parts, one file each:

* :mod:`.analysis`: the fx analysis (:func:`flatten`, :func:`analyse` -> :class:`TPPlan`,
  :class:`ParamShard`);
* :mod:`.sharding`: one tensor rank's graph (:func:`shard_block`): the rank's shards with the
  collectives as marker calls (``mode="local"``), or ``nn.Linear`` modules holding arranged
  whole weights (``mode="export"``);
* :mod:`.lockstep`: the in-process runner's tensor-parallel stage (:class:`TensorParallelChunk`,
  :func:`run_lockstep`): the ranks' graphs side by side, the markers as joint collectives;
* :mod:`.dtensor_export`: the styles ``parallelize_module`` applies to an export-mode graph
  across processes (:func:`export_styles`, :func:`parallel_styles`).
"""

from interop.live.tensor_parallel.analysis import DEGREES, ParamShard, TPPlan, analyse, flatten
from interop.live.tensor_parallel.dtensor_export import export_styles, parallel_styles, row_style
from interop.live.tensor_parallel.lockstep import TensorParallelChunk, run_lockstep
from interop.live.tensor_parallel.sharding import (MARKERS, RowParallelLinear, recording, shard_block,
                                                   tp_region_input, tp_region_output)

__all__ = ["DEGREES", "MARKERS", "ParamShard", "RowParallelLinear", "TPPlan", "TensorParallelChunk", "analyse",
           "export_styles", "flatten", "parallel_styles", "recording", "row_style", "run_lockstep", "shard_block",
           "tp_region_input", "tp_region_output"]
