"""Rack specs: what a rack is made of, and the forms it is written in (pure Python, no torch).

* :mod:`devices.rack.parts`: the parts of a spec (:class:`Slot`, :class:`SlotGroup`,
  :class:`DomainSpec`, :class:`NetworkSpec`);
* :mod:`devices.rack.spec`: :class:`RackSpec`, the whole rack, described in a few
  small objects however many slots it has (:mod:`devices.rack.domain_table` holds
  its domains as runs);
* :mod:`devices.rack.layout`: the default domains and network of a kind;
* :mod:`devices.rack.numerics`: a slot's numerics settings;
* :mod:`devices.rack.parse`: ``"kind:count+kind:count"`` strings, presets and ``*N``
  replicas; :mod:`devices.rack.toml_file`: rack files.

:func:`devices.parse_rack` is the one entry point that turns any of these forms
into a :class:`RackSpec`.
"""
