"""Children of a ``hybrid run`` process run under the same CUDA layer and rack.

The mechanism, in two parts that ``hybrid run`` (and ``python -m interop.run``) sets up before the script starts:

- the environment variable ``HYBRID_CUDA_LAYER`` holds the run's settings as JSON: the rack (as ``--rack``
  spells it, or the current rack's name), the device map, strictness and the report path;
- ``interop/cuda_layer/startup`` is put first on ``PYTHONPATH``; its ``sitecustomize.py`` runs at the start of
  every Python child and, once the child imports torch, calls :func:`install_from_env`.

So a child started by ``mp.spawn`` / ``torch.multiprocessing.spawn``, a DataLoader worker or a
``ProcessPoolExecutor`` worker of the ``spawn`` or ``forkserver`` context, or any subprocess that runs Python
and imports torch, has ``cuda:N`` mapped onto the same slots as its parent, before the script's code in it
runs. Forked children inherit the parent's layer with its memory. A child started without the environment
(``env={}``), with ``python -I`` or ``-S``, or by another interpreter is not reached; one that is reached but
cannot install the layer raises, at its first CUDA call, an error that says why.

With ``--report PATH``, each child writes its own report as ``PATH.pid<pid>.json``/``.md`` when it exits
normally (forked workers leave with ``os._exit`` and write none).
"""

from __future__ import annotations

import json
import os

ENV = "HYBRID_CUDA_LAYER"
"""The environment variable holding the run's settings for its children."""

STARTUP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup")
"""The directory whose ``sitecustomize.py`` arms the children (first on their ``PYTHONPATH``)."""


def export(rack: str, device_map: str | None, strict: bool, report: str | None, env=os.environ) -> None:
    """Publish the run's settings to every child started from now on (``env`` is the process environment)."""
    if rack.endswith(".toml") and os.path.exists(rack):
        rack = os.path.abspath(rack)
    env[ENV] = json.dumps({"rack": rack, "map": device_map or "", "strict": bool(strict),
                           "report": os.path.abspath(report) if report else None, "parent": os.getpid()})
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != STARTUP_DIR]
    env["PYTHONPATH"] = os.pathsep.join([STARTUP_DIR, *paths])


def settings(env=os.environ) -> dict | None:
    """The run's settings this process inherited, or None outside a ``hybrid run`` tree."""
    text = env.get(ENV)
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{ENV} is not the JSON `hybrid run` writes ({e}): {text[:200]!r}") from None
    if not isinstance(value, dict) or not isinstance(value.get("rack"), str):
        raise ValueError(f"{ENV} must hold an object with a 'rack' string, got {text[:200]!r}")
    return value


def install_from_env() -> None:
    """Install the layer as the parent ``hybrid run`` did (called once torch is imported in a child)."""
    from interop import cuda_layer

    if cuda_layer.installed():
        return
    try:
        found = settings()
        if found is None:
            return
        import interop

        interop.set_rack(interop.Rack.from_spec(found["rack"]))
        cuda_layer.configure(map=found.get("map") or None, strict=bool(found.get("strict")))
    except Exception as e:  # noqa: BLE001  (any failure is reported at the child's first CUDA call)
        _refuse_cuda(f"{type(e).__name__}: {e}")
        return
    if found.get("report"):
        _report_at_exit(found["report"])


def _refuse_cuda(reason: str) -> None:
    import torch

    message = (f"this process is a child of `hybrid run` ({ENV} is set) but the CUDA layer could not be installed "
               f"in it: {reason}. Fix the cause, or unset {ENV} in the child's environment to run it without the "
               "layer")

    def refuse(*args, **kwargs):
        raise RuntimeError(message)

    torch.cuda._lazy_init = refuse
    torch.cuda.set_device = refuse


def _report_at_exit(path: str) -> None:
    import atexit
    import sys

    def write() -> None:
        from interop.cuda_layer.report import build

        stem, ext = os.path.splitext(path)
        stem = stem if ext in (".json", ".md") else path
        try:
            build(script=" ".join(sys.argv) or "<child>").write(f"{stem}.pid{os.getpid()}")
        except Exception as e:  # noqa: BLE001  (a report must not change the child's exit)
            print(f"hybrid run: child {os.getpid()} could not write its report: {type(e).__name__}: {e}",
                  file=sys.stderr)

    atexit.register(write)
