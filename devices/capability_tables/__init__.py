"""One capability table per module; the module name is the kind (see :mod:`devices.capability`).

Each module defines ``CAPABILITIES = Capabilities(...)``.  The rules shared by
a vendor's stack live in ``_neuron.py`` (AWS Neuron on Trainium) and
``_cuda.py`` (PyTorch on CUDA on NVIDIA GPUs); a kind's file composes them in
order (the first rule that covers an (op class, dtype) answers) and adds what
is its own.
"""
