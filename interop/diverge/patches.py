"""What the recorder patches in libraries, each once per process: the ``hybrid`` backend's issuing of a collective
(reported to the installed recorder), a PipelineStage's shape inference (not recorded) and ``nn.DataParallel``'s
replication (its replicas' modules named as the modules they copy)."""

from __future__ import annotations

PIPELINE_STAGE = "torch.distributed.pipelining.stage"
_METADATA_INFERENCE = ("_forward_metadata_inference", "_backward_metadata_inference")


def pause_metadata_inference(module) -> None:
    """A PipelineStage infers its shapes by running its module forward and backward once on placeholder tensors
    (on the last stage, tensors of no data): not a training call, so the recorder pauses through it (else the
    stages' and the reference's call indices would count it differently)."""
    stage = getattr(module, "PipelineStage", None)
    for name in _METADATA_INFERENCE:
        original = stage.__dict__.get(name) if stage is not None else None
        if original is None or getattr(original, "_diverge", False):
            continue

        def paused(self, *args, _original=original, **kwargs):
            recorder = ACTIVE[0] if ACTIVE else None
            if recorder is not None:
                recorder.paused += 1
            try:
                return _original(self, *args, **kwargs)
            finally:
                if recorder is not None:
                    recorder.paused -= 1

        paused._diverge = True
        setattr(stage, name, paused)


ACTIVE: list = []
"""The recorder installed now (at most one; :class:`interop.diverge.recorder.Recorder` puts itself here), to
which the ``hybrid`` backend's collectives are reported."""


def watch_collectives() -> None:
    """Report every collective the ``hybrid`` backend issues to the installed recorder: its tensors when issued,
    again once complete. Patches the backend's one issuing method, once per process."""
    from collectives.distributed._group import ProcessGroupHybrid

    original = ProcessGroupHybrid._issue
    if getattr(original, "_diverge", False):
        return

    def _issue(self, label, build, opts=None):
        seen = []

        def recording_build():
            call, launch, aliases = build()
            seen.append(aliases)
            return call, launch, aliases

        work = original(self, label, recording_build, opts)
        if seen and ACTIVE:
            ACTIVE[0].collective(label, self.getSize(), list(seen[0]), work)
        return work

    _issue._diverge = True
    ProcessGroupHybrid._issue = _issue


def watch_replicas() -> None:
    """Tell the installed recorder of every set of replicas ``nn.DataParallel`` makes, before they run (each in a
    thread of its own): :meth:`interop.diverge.recorder.Recorder.replicas`. Patches ``DataParallel.replicate``,
    once per process."""
    from torch.nn.parallel import DataParallel

    original = DataParallel.replicate
    if getattr(original, "_diverge", False):
        return

    def replicate(self, module, device_ids):
        replicas = original(self, module, device_ids)
        if ACTIVE:
            ACTIVE[0].replicas(module, replicas)
        return replicas

    replicate._diverge = True
    DataParallel.replicate = replicate
