"""Backends judged against fp32 truth on the embedded tiny model (CPU)."""

from __future__ import annotations

import json

import pytest
import torch

from tuneproof.attention.adjudicate import Diff, adjudicate
from tuneproof.cli.app import main
from tuneproof.errors import TuneproofError


def test_diff_reports_max_and_mean() -> None:
    d = Diff.of(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.5, 1.0]))
    assert (d.max_abs, d.mean_abs) == (2.0, pytest.approx(2.5 / 3))
    many = Diff.of_many({"a": torch.zeros(2), "b": torch.ones(2)}, {"a": torch.ones(2), "b": torch.ones(2)})
    assert (many.max_abs, many.mean_abs) == (1.0, 0.5)


def test_adjudicate_names_the_backend_closest_to_truth(capsys) -> None:
    assert (
        main(["adjudicate", "--widths", "64,160", "--backends", "sdpa,flex_attention,eager", "--json"]) == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert set(d["closest_to_fp32_truth"]) == {"64", "160"}
    assert set(d["closest_to_fp32_truth"].values()) <= {"sdpa", "flex_attention", "eager"}
    rows = {(r["backend"], r["width"]): r for r in d["results"]}
    assert len(rows) == 6
    for (backend, _), r in rows.items():
        assert r["logits"]["max_abs"] >= r["logits"]["mean_abs"] > 0  # bf16 is never exactly fp32
        if backend == "flex_attention":
            assert r["grads"] is None and "no backward on CPU" in r["grads_note"]
        else:
            assert r["grads"]["mean_abs"] > 0
    # backends differ from each other: each is measured, none is a copy of another
    assert rows[("sdpa", 160)]["logits"] != rows[("eager", 160)]["logits"]
    assert any("forward only" in n for n in d["notes"])


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"backends": ["flex_attention"], "grads": "on"}, "backward requested for flex_attention on CPU"),
        ({"backends": ["xformers"]}, "unknown ['xformers']"),
        ({"backends": ["sdpa"], "dtype": "fp32"}, "cannot be adjudicated"),
        ({"backends": ["sdpa"], "grads": "maybe"}, "--grads 'maybe'"),
    ],
)
def test_bad_adjudicate_input(kw: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError) as e:
        adjudicate("tiny", [64], **kw)
    assert fragment in e.value.message
