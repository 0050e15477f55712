"""`sample_packing` without a packing-aware attention option lets a packed row's documents attend to each
other (Axolotl 0.19 warns of "cross-sample decontamination"): preflight says so, with the fix, on
practitioners' own configs (tests/data/axolotl/practitioners, provenance in SOURCES.md there) and on
configs written here for each of Axolotl's attention options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_preflight
import torch
from test_preflight import DATA, _preflight

hub = test_preflight.hub  # the fake Hugging Face cache of the bases' published config.json
PRACTITIONERS = DATA / "axolotl" / "practitioners"
NO_FLASH = PRACTITIONERS / "modal-labs__llm-finetuning__mistral@3442b1f15.yml"
FLASH = PRACTITIONERS / "modal-labs__llm-finetuning__mixtral_out_of_box@f64c8d7ea.yml"
UNSET_WARNING = "`sample_packing` without an attention backend does not handle cross-sample decontamination"


def _contamination(d: dict) -> list[str]:  # type: ignore[type-arg]
    return [f for f in d["findings"] if "attend to each other (cross-sample contamination)" in f]


def test_the_leak_is_real_with_the_mask_axolotls_collator_passes() -> None:
    """Why the rule holds (transformers 5.24, its default sdpa): the multipack collator's mask, documents
    numbered 1 and 2, lets the second document attend to the first; without it (Axolotl drops it for
    sdpa and eager) the restarting position_ids keep them apart."""
    from tiny_models import build_model, config_dict

    model = build_model(config_dict("mistral", num_hidden_layers=1), "sdpa").train()
    doc_a, doc_b = [3, 4, 5, 6], [7, 8, 9]
    ids = torch.tensor([doc_a + doc_b])
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2]])
    numbered = torch.tensor([[1, 1, 1, 1, 2, 2, 2]])  # V2BatchSamplerDataCollatorForSeq2Seq's attention_mask
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([doc_b]), use_cache=False).logits[0]
        kept = model(input_ids=ids, position_ids=positions, attention_mask=numbered, use_cache=False)
        dropped = model(input_ids=ids, position_ids=positions, use_cache=False)
    assert not torch.allclose(kept.logits[0, 4:], alone, atol=1e-3)  # doc_b attends to doc_a
    assert torch.allclose(dropped.logits[0, 4:], alone, atol=1e-5)  # documents isolated


def test_a_practitioners_packed_run_without_flash_attention_is_a_finding_with_the_fix(
    capsys, monkeypatch, hub
) -> None:
    code, out, _ = _preflight([str(NO_FLASH), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert code == 1 and d["run"]["sample_packing"] and d["run"]["attn_implementation"] is None
    (finding,) = _contamination(d)
    assert "transformers' default, sdpa" in finding and "numbered 1, 2, 3" in finding
    assert f"Axolotl warns the same ('{UNSET_WARNING}'" in finding
    fixes = finding.split("Fix: ")[1]
    assert all(f in fixes for f in ("flash_attention: true", "flex_attention: true", "sample_packing: false"))
    assert "sdp_attention: true" in fixes  # Axolotl 0.19 drops the mask for sdpa
    dispatch = d["sections"]["dispatch"]
    assert dispatch["packing"] == {"isolated": False, "reason": dispatch["packing"]["reason"],
                                   "axolotl_warning": UNSET_WARNING}  # fmt: skip
    assert dispatch["packed"] is False  # no per-document mask: rows with one causal mask, padded after
    (layer,) = dispatch["layers"]
    assert "packed batch" not in layer["mask_reason"] and "padded batch" in layer["mask_reason"]
    assert dispatch["findings"].count(finding) == 1


def test_the_finding_reads_in_the_text_report(capsys, monkeypatch, hub) -> None:
    _, out, _ = _preflight([str(NO_FLASH), "--gpu", "H100"], capsys, monkeypatch, hub)
    assert "  - attention: sample_packing: the documents packed into a row attend to each other" in out
    assert "packed position_ids" not in out  # the per-document claim is gone
    assert "each row gets one causal mask across its documents" in out


def test_a_practitioners_packed_run_on_flash_attention_is_no_finding(capsys, monkeypatch, hub) -> None:
    _, out, _ = _preflight([str(FLASH), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert d["run"]["sample_packing"] and d["run"]["attn_implementation"] == "flash_attention_2"
    assert _contamination(d) == [] and not any("decontamination" in f for f in d["findings"])
    assert d["sections"]["dispatch"]["packing"]["isolated"] is True and d["sections"]["dispatch"]["packed"]


@pytest.mark.parametrize(
    "attention,isolated",
    [
        ("", False),  # no attention option: transformers' default sdpa, the mask kept
        ("flash_attention: false\n", False),
        ("flash_attention: false\nsdp_attention: true\n", True),  # Axolotl drops the mask for sdpa
        ("eager_attention: true\n", True),
        ("flash_attention: true\n", True),
        ("flex_attention: true\n", True),
        ("xformers_attention: true\n", True),
        ("attn_implementation: flash_attention_torch\n", True),
        ("attn_implementation: kernels-community/flash-attn3@main\n", True),  # @revision stripped first
        ("attn_implementation: kernels-community/vllm-flash-attn3\n", False),  # a hub kernel outside the set
        ("attn_implementation: fp8\n", False),
    ],
)
def test_axolotls_attention_options_decide_whether_packed_documents_stay_apart(
    tmp_path: Path, capsys, monkeypatch, hub, attention: str, isolated: bool
) -> None:
    run = tmp_path / "r.yml"
    base = "base_model: NousResearch/Llama-3.2-1B\nsequence_len: 2048\nmicro_batch_size: 2\n"
    run.write_text(base + "sample_packing: true\n" + attention)
    code, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert d["sections"]["dispatch"]["packing"]["isolated"] is isolated
    assert len(_contamination(d)) == (0 if isolated else 1)
    assert isolated or code == 1  # a finding: the verdict is FINDINGS
    if not isolated and "attn_implementation" in attention:
        attn = attention.split(": ")[1].strip()
        assert f"`sample_packing` with `attn_implementation='{attn}'` does not handle" in _contamination(d)[0]
    if isolated and "sdp_attention" in attention:  # a per-document mask, rebuilt from position_ids
        assert "packed batch" in d["sections"]["dispatch"]["layers"][0]["mask_reason"]


def test_no_packing_no_verdict(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    run = tmp_path / "r.yml"
    run.write_text("base_model: NousResearch/Llama-3.2-1B\nsequence_len: 2048\nsample_packing: false\n")
    _, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert d["sections"]["dispatch"]["packing"] is None and _contamination(d) == []
