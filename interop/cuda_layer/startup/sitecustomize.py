"""Started by Python in a child of a ``hybrid run`` process (this directory is on its PYTHONPATH): once the child
imports torch, the CUDA layer is installed with the parent's rack, map and strictness
(:mod:`interop.cuda_layer.children` says how; nothing is imported before torch is).

Any other ``sitecustomize`` on the path runs afterwards, as it would have without this one.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ENV = "HYBRID_CUDA_LAYER"


def _arm() -> None:
    # interop.import_hooks imports nothing of the package (and no torch): loaded by path under its own name, it is
    # the module `import interop` finds later, so this process keeps one finder.
    hooks_path = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "import_hooks.py")
    hooks = sys.modules.get("interop.import_hooks")
    if hooks is None:
        spec = importlib.util.spec_from_file_location("interop.import_hooks", hooks_path)
        hooks = importlib.util.module_from_spec(spec)
        sys.modules["interop.import_hooks"] = hooks
        spec.loader.exec_module(hooks)

    def install(_torch) -> None:
        from interop.cuda_layer import children

        children.install_from_env()

    hooks.after_import("torch", install)


def _chain() -> None:
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get(_ENV):
    _arm()
_chain()
