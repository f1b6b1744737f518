"""Builds interop._C from csrc/ against the torch that is already installed.

Run with --no-build-isolation (bootstrap.sh does): an isolated build
environment would resolve `torch` afresh and may pull a multi-GB CUDA build.
Object files are cached under build/ and compiled with ninja, so a rebuild
after a change in csrc/ recompiles only what changed.
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
sources = sorted(
    os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "csrc", "**", "*.cpp"), recursive=True)
)

# bootstrap.sh builds the extension in place with `build_ext --inplace` (cached,
# incremental) and then installs the package in editable mode only for its
# console script; this switch keeps that second step from compiling again.
skip_extension = os.environ.get("HYBRID_SKIP_EXTENSION") == "1"

setup(
    ext_modules=[] if skip_extension else [
        CppExtension(
            name="interop._C",
            sources=sources,
            include_dirs=[os.path.join(HERE, "csrc")],
            extra_compile_args=["-O2", "-g0", "-fvisibility=hidden", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
