"""Every figure of devices/ and of the collectives' tuning names the public document it came from; devices/SOURCES.md
lists them and cannot drift."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
import subprocess
import sys

import pytest

import collectives.tuning
import devices
from devices import fabrics, neuron, sources, sources_md
from devices.cost import calibration, multi_tensor
from devices.cost.efficiency import params_for
from devices.figure import Figure


def _figures_in(value, depth: int = 0) -> list[Figure]:
    """The figures inside a value: itself, a mapping's values, a sequence's items, a dataclass's fields."""
    if isinstance(value, Figure):
        return [value]
    if depth > 3 or isinstance(value, (str, bytes, type)):
        return []
    if isinstance(value, Mapping):
        return [f for v in value.values() for f in _figures_in(v, depth + 1)]
    if isinstance(value, (tuple, list)):
        return [f for v in value for f in _figures_in(v, depth + 1)]
    if dataclasses.is_dataclass(value):
        return [f for field in dataclasses.fields(value) for f in _figures_in(getattr(value, field.name), depth + 1)]
    return []


def _all_figures() -> dict[str, Figure]:
    """Every figure the catalogue, the fabrics and the cost model hand out, by where it lives."""
    found: dict[str, Figure] = {}
    for kind in devices.kinds():
        chip = devices.chip(kind)
        for name, fig in chip.figures().items():
            if fig is not None:
                found[f"{kind}.{name}"] = fig
        params = params_for(kind, chip.family)
        for field in dataclasses.fields(params):
            found[f"cost[{kind}].{field.name}"] = getattr(params, field.name)
        found[f"network[{kind}]"] = fabrics.network_bandwidth(kind)
    for name, value in vars(fabrics).items():
        if isinstance(value, Figure):
            found[f"fabrics.{name}"] = value
    for name, spec in fabrics.fabrics().items():
        found[f"fabric[{name}].latency"] = spec.latency
        if spec.bandwidth is not None:
            found[f"fabric[{name}].bandwidth"] = spec.bandwidth
    for kind in ("trn1", "trn2", "trn3", "trn4"):
        found[f"neuron.cores_per_chip({kind})"] = neuron.cores_per_chip(kind)
    found["neuron.LNC_DEFAULT"] = neuron.LNC_DEFAULT
    for name, value in vars(calibration).items():
        if isinstance(value, Figure):
            found[f"calibration.{name}"] = value
    for name, value in vars(collectives.tuning).items():
        if not name.startswith("_"):
            for i, fig in enumerate(_figures_in(value)):
                found[f"collectives.tuning.{name}[{i}]"] = fig
    for name, value in vars(multi_tensor).items():
        for i, fig in enumerate(value if isinstance(value, tuple) else (value,)):
            if isinstance(fig, Figure):
                found[f"multi_tensor.{name}[{i}]"] = fig
    return found


def _cites(fig: Figure) -> list[sources.Document]:
    return [d for d in sources.DOCUMENTS if d.marker in fig.source]


def test_every_figure_names_its_document_or_says_it_is_an_assumption():
    figures = _all_figures()
    assert len(figures) > 150
    unsourced = []
    for where, fig in figures.items():
        assert "specs.md" not in fig.source and "collectives.md" not in fig.source, where
        if _cites(fig):
            continue
        # An assumption has no document; it must say so and be labelled projected.
        if not (fig.status == "projected" and fig.source.startswith("assumption")):
            unsourced.append(f"{where}: {fig.source!r}")
    assert not unsourced, "\n".join(unsourced)


def test_every_document_is_cited_and_complete():
    cited = {id(d) for fig in _all_figures().values() for d in _cites(fig)}
    uncited = [d.title for d in sources.DOCUMENTS if id(d) not in cited]
    assert not uncited, f"documents no figure cites (drop them or cite them): {uncited}"
    for d in sources.DOCUMENTS:
        assert d.read[:4].isdigit() and d.read[4] == "-", d.title
        assert d.url.startswith(("https://", "aws-neuron/", "DU-", "recorded")), d.title
        assert all(v.startswith("https://") for v in d.via), d.title


def test_a_figure_read_through_a_reproduction_is_not_published():
    for where, fig in _all_figures().items():
        docs = _cites(fig)
        if docs and all(d.via for d in docs) and fig.status == "published":
            pytest.fail(f"{where}: read only through {docs[0].via}, so its status is secondary, not published")


def test_sources_md_is_generated_from_the_documents():
    assert sources_md.SOURCES_MD.read_text(encoding="utf-8") == sources_md.render(), (
        "devices/SOURCES.md is out of date: run python -m devices.sources_md --write")
    for d in sources.DOCUMENTS:
        assert d.title in sources_md.render() and d.url in sources_md.render()


def test_sources_md_check_command_fails_on_drift(tmp_path, monkeypatch):
    stale = tmp_path / "SOURCES.md"
    stale.write_text("# stale\n")
    monkeypatch.setattr(sources_md, "SOURCES_MD", stale)
    assert sources_md.main(["--check"]) == 1
    assert sources_md.main(["--write"]) == 0
    assert sources_md.main(["--check"]) == 0 and stale.read_text() == sources_md.render()
    assert sources_md.main(["--bogus"]) == 2


def test_document_fields_are_checked():
    with pytest.raises(ValueError, match="Document.url"):
        sources.Document("t", "p", " ", "2026-12-02", "vendor")
    with pytest.raises(ValueError, match="Document.kind: unknown kind 'blog'"):
        sources.Document("t", "p", "https://x", "2026-12-02", "blog")
    doc = sources.Document("Title", "Pub", "https://x", "2026-12-02", "vendor", ("https://y",))
    assert doc.cite("p. 3") == "Title, p. 3 (Pub, https://x; read 2026-12-02 through https://y)"


def test_racks_command_shows_fabric_sources():
    out = subprocess.run([sys.executable, "-m", "hybrid_cli", "racks", "--kind", "gb200"], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "== fabrics" in out.stdout and "network gb200" in out.stdout
    assert "devices/SOURCES.md" in out.stdout and "specs.md" not in out.stdout
    full = subprocess.run([sys.executable, "-m", "hybrid_cli", "racks", "--kind", "gb200", "--sources"],
                          capture_output=True, text=True, timeout=180)
    assert full.returncode == 0, full.stderr
    assert "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc" in full.stdout
    assert "specs.md" not in full.stdout


def test_cited_numbers_the_documents_a_citation_names():
    first, last = sources.DOCUMENTS[0], sources.DOCUMENTS[-1]
    assert sources.cited(first.cite("p. 3")) == (1,)
    assert sources.cited(first.cite() + "; " + last.cite()) == (1, len(sources.DOCUMENTS))
    assert sources.cited("no figure found; left unset rather than invented") == ()
