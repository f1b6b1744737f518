"""One chip kind per module; the module name is the kind.

Each module defines ``CHIP = Chip(...)`` (:mod:`devices.chip`: peaks, memory,
links, power, price, every figure a sourced :class:`devices.Figure`) and
``CAPABILITIES = Capabilities(...)`` (:mod:`devices.capability`: what the
kind computes in, per op class and dtype, under its vendor's stack). The rules
shared by a vendor's stack live in ``_neuron.py``/``_neuron_numerics.py`` (AWS
Neuron on Trainium) and ``_cuda.py``/``_cuda_numerics.py`` (PyTorch on CUDA);
a kind's file composes them in order (the first rule that covers an
(op class, dtype) answers) and adds what is its own. Adding a kind is adding
a file (and, for racks, a preset).
"""
