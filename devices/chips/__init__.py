"""One chip per module; the module name is the kind (see :mod:`devices.chip`).

Each module defines ``CHIP = Chip(...)``.  Figures are dense rates in SI
units, each with its source and status; the status and the note say how far a
number can be trusted.
"""
