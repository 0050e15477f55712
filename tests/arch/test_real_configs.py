"""The ledger on published config.json files of real checkpoints (tests/data/configs, provenance in
tests/data/README.md): each one resolves, both ledgers are positive for a full fine-tune and for LoRA
with performed >= intended, and where the model card states a parameter count (params.json) the
estimate is within 3 % of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.coverage import refusal
from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step, flop_report
from tuneproof.measure.model import parameter_estimate

CONFIGS = Path(__file__).parent.parent / "data" / "configs"
PARAMS = json.loads((CONFIGS / "params.json").read_text())
FILES = sorted(p for p in CONFIGS.glob("*.json") if p.name != "params.json")


def test_the_sidecar_names_only_files_that_exist() -> None:
    assert set(PARAMS) <= {p.name for p in FILES}
    for name, record in PARAMS.items():
        assert record["total"] > 0 and record["source"], name
        assert record["active"] is None or 0 < record["active"] < record["total"], name


def _not_costed(path: Path) -> str | None:
    data = json.loads(path.read_text())
    text = data.get("text_config") or {}
    return refusal(data["model_type"]) or refusal(text.get("model_type", ""))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_published_config_resolves_and_both_ledgers_are_sane(path: Path) -> None:
    why = _not_costed(path)
    if why is not None:  # a family tuneproof refuses (docs/families.md): refused with that reason
        with pytest.raises(TuneproofError, match=re.escape(why)):
            resolve(path)
        return
    model = resolve(path)
    for mode in ("full", "lora"):
        report = flop_report(model.shape, Step(seq_len=4096, mode=mode))
        intended, performed = report.intended.total, report.performed.total
        assert intended > 0 and performed > 0, (mode, intended, performed)
        assert performed >= intended, (mode, intended, performed)


@pytest.mark.parametrize(
    "path", [p for p in FILES if p.name in PARAMS and _not_costed(p) is None], ids=lambda p: p.stem
)
def test_parameter_estimate_matches_the_published_count(path: Path) -> None:
    published = PARAMS[path.name]["total"]
    estimate = parameter_estimate(resolve(path))
    assert abs(estimate - published) <= 0.03 * published, (estimate, published, PARAMS[path.name]["source"])
