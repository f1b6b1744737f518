"""Numerics on the rack's slots: each slot's numerics mode and its settings (:mod:`.mode`, :mod:`.settings`),
what ``device`` mode does to an op (:mod:`.device_ops`, a dispatch mode installed while a slot uses it), and
block-scaled matrix multiplication on slots (:mod:`.scaled_mm`). Built on :mod:`interop.numerics.maths`."""
