"""Live execution of plans: a real model cut into blocks, run on the rack's slots, exported to torch.distributed.

The paper half (what each block costs, the step model, the plan search) is
:mod:`planner`, which imports no torch; this package is where a plan meets real
tensors:

* :mod:`interop.live.plan`: :func:`~interop.live.plan.plan` (the entry point behind
  ``interop.plan``, and its validation) and :class:`~interop.live.plan.Plan` (``.apply``
  runs it); :mod:`~interop.live.plan_presentation` (its table, JSON and Gantt chart) and
  :mod:`~interop.live.baselines` (what it is compared with);
* :mod:`interop.live.cut`: cutting a model with torch.export into blocks;
* :mod:`interop.live.exported_blocks`: the blocks, the values crossing their boundaries, and
  each block's profile (one meta trace) for the planner;
* :mod:`interop.live.bind`: blocks bound to a device and to the model's parameters (stage
  modules, a replica's rows);
* the in-process runner: :mod:`interop.live.runner` (:class:`PlanRunner`: set-up and the step),
  :mod:`interop.live.pipeline` (stage replicas, the schedule's actions, the copies between
  stages), :mod:`interop.live.reduction` (gradient buffers and their reductions) and
  :mod:`interop.live.record` (one :class:`StepRecord` per step, for both runners);
* :mod:`interop.live.tensor_parallel`: tensor parallelism of a block (fx analysis,
  sharding, lockstep autograd in one process, the DTensor styles across processes);
* :mod:`interop.live.distributed`: the export of a plan to torch.distributed engines
  (pipelining, DTensor, FSDP2) across processes;
* :mod:`interop.live.plan_models`, :mod:`interop.live.plan_run`: the models and the
  run behind ``hybrid plan``.
"""
