"""The ``hybrid`` backend's names: a leaf that every module of the package may import (the package's own
functions import those modules, so none of them imports the package)."""

BACKEND = "hybrid"
"""The name to pass to ``init_process_group`` / ``new_group``."""
DEVICE = "hybrid"
"""The device type whose tensors the backend takes (besides ``cpu``)."""

__all__ = ["BACKEND", "DEVICE"]
