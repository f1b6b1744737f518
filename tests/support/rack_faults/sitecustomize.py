"""A fault of the rack's own, injected for tests (tests/interop/test_diverge.py): put this folder first on
PYTHONPATH of a run and set ``RACK_FAULT_ALL_REDUCE=N``, and the N-th all-reduce (counted from 1 in each process)
of the ``hybrid`` backend returns its result times 1.5 on every rank.

Only the rack's processes import the ``hybrid`` backend (:mod:`collectives.distributed._ops`): a plain-torch run
beside it (the CPU over Gloo) gets this file too and is left as it is, as a collective that computes otherwise
on a rack would leave its reference. Nothing is imported here until the backend is (a sitecustomize that
imported torch or interop would change every process it is put in).
"""

import importlib.abc
import importlib.machinery
import os
import sys

BACKEND = "collectives.distributed._ops"
FACTOR = 1.5


def _perturb(ops, which: int) -> None:
    original = ops.Collectives.allreduce
    count = [0]

    def allreduce(self, tensors, opts=None):
        work = original(self, tensors, opts)
        count[0] += 1
        if count[0] == which:
            work.wait()
            for t in tensors:
                t.mul_(FACTOR)
        return work

    ops.Collectives.allreduce = allreduce


class _AfterBackend(importlib.abc.MetaPathFinder):
    """Patches the backend's module right after it is first imported."""

    def __init__(self, which: int):
        self.which = which

    def find_spec(self, fullname, path, target=None):
        if fullname != BACKEND:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        exec_module = spec.loader.exec_module

        def exec_and_perturb(module):
            exec_module(module)
            _perturb(module, self.which)
        spec.loader.exec_module = exec_and_perturb
        return spec


if os.environ.get("RACK_FAULT_ALL_REDUCE"):
    sys.meta_path.insert(0, _AfterBackend(int(os.environ["RACK_FAULT_ALL_REDUCE"])))
