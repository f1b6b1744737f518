"""AWS Trainium4 (announced, not shipping): assumed to compute in what Trainium3 does (every rule projected)."""

from dataclasses import replace

from devices.capability_tables.trn3 import CAPABILITIES as _TRN3
from devices.capability import Capabilities

_BASIS = "projected from Trainium3: no Trainium4 data-type documentation exists yet"


def _projected(entry):
    return replace(entry, status="projected" if entry.status != "assumption" else "assumption",
                   source=f"{entry.source} ({_BASIS})")


CAPABILITIES = Capabilities(
    kind="trn4",
    compute=tuple(replace(rule, status="projected" if rule.status != "assumption" else "assumption",
                          source=f"{rule.source} ({_BASIS})") for rule in _TRN3.compute),
    cuda=replace(_TRN3.cuda, status="assumption",
                 note=f"{_TRN3.cuda.note}; {_BASIS}, NeuronCores per chip assumed equal to Trn3's"),
    notes=_TRN3.notes,
    rounding=replace(_TRN3.rounding, status="projected", source=f"{_TRN3.rounding.source} ({_BASIS})"),
    block_formats=tuple(_projected(entry) for entry in _TRN3.block_formats),
    accumulation=tuple(_projected(entry) for entry in _TRN3.accumulation),
)
