"""AWS Trainium4 (announced, not shipping): assumed to compute in what Trainium3 does (every rule projected)."""

from dataclasses import replace

from devices.capability_tables.trn3 import CAPABILITIES as _TRN3
from devices.capability import Capabilities

_BASIS = "projected from Trainium3: no Trainium4 data-type documentation exists yet"

CAPABILITIES = Capabilities(
    kind="trn4",
    compute=tuple(replace(rule, status="projected" if rule.status != "assumption" else "assumption",
                          source=f"{rule.source} ({_BASIS})") for rule in _TRN3.compute),
    cuda=replace(_TRN3.cuda, status="assumption",
                 note=f"{_TRN3.cuda.note}; {_BASIS}, NeuronCores per chip assumed equal to Trn3's"),
    notes=_TRN3.notes,
)
