"""``import interop.cuda``: install the CUDA layer (:mod:`interop.cuda_layer`) with its defaults, in this process.

The one line a notebook or script puts first to run its CUDA code on the rack:
each ``cuda:N`` becomes the current rack's N-th GPU-kind slot. Every public name
of the layer is here too: ``interop.cuda.configure(map=..., strict=...)`` changes
the map, ``interop.cuda.report()`` reports, ``interop.cuda.uninstall()`` undoes it.
"""

from interop.cuda_layer import *  # noqa: F401,F403  (the layer's public names, as interop.cuda.<name>)
from interop.cuda_layer import __all__, configure, installed

if not installed():  # under `hybrid run` the runner configured it already, with its --map and --strict
    configure()
