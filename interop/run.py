"""``python -m interop.run``: the entry point that torchrun and ``python -m`` know (``torchrun -m interop.run SCRIPT``).

The runner itself is :mod:`interop.cuda_layer.run` (the CUDA layer's, as ``hybrid run``).
"""

import sys

from interop.cuda_layer.run import main

if __name__ == "__main__":
    sys.exit(main())
