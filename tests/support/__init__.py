"""What the tests share besides fixtures: harnesses, reference kernels, worker scripts, the CUDA scripts.

:data:`ROOT` is the repository's root (a string), for tests that run commands or read files there.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
