"""torch.cuda as torch built it, captured at ``import interop``: the runtime's own view of real GPUs.

The CUDA layer (:mod:`interop.cuda`) makes ``torch.cuda`` answer for rack slots; the runtime itself (which
slots can be backed by a real GPU, synchronizing one) must keep asking torch's own functions.
"""

from __future__ import annotations

import torch

is_available = torch.cuda.is_available
device_count = torch.cuda.device_count
synchronize = torch.cuda.synchronize


def count() -> int:
    """Real CUDA devices this process can use (0 without a CUDA build or a GPU)."""
    return device_count() if is_available() else 0
