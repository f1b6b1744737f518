"""``python -m interop.cuda_layer.namespace_doc``: print docs/cuda_namespace.md, the table of CUDA's namespace
under the layer (:func:`interop.cuda_layer.namespace.markdown`), on the default rack.

Apart from :mod:`interop.cuda_layer.namespace` because it installs the layer, which installs the namespace's
patches: the module the layer imports cannot import the layer back.
"""

from __future__ import annotations

import sys

from interop.cuda_layer import configure, installed
from interop.cuda_layer.namespace import markdown


def main() -> int:
    """Install the layer (when it is not) and print the table."""
    if not installed():
        configure()
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
