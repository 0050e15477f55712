"""The performed ledger against FlopCounterMode on real transformers models: the one parity suite.

Every causal-LM model_type the installed transformers ships, enumerated (not a hand-picked list): each is
either costed exactly (performed ledger == FlopCounterMode for forward, full, LoRA and LoRA with
checkpointing, on a tiny build from its own config class) or refused with the reason that
`tuneproof.arch.coverage` (and docs/families.md) gives for it. Then the hand-made tiny configs of the
families the CASE runs (tests/tiny_models.py: windows, kv sharing, experts) for --attn eager: forward,
full fine-tune, LoRA (PEFT) and activation checkpointing; odd widths, batch > 1 and padded batches."""

from __future__ import annotations

import pytest

from family_parity import UNVERIFIED, causal_lm_types, markdown, parity
from tiny_models import TINY, TINY_GEMMA4_KV_SHARED, build_model, config_dict, counted_flops, linear_targets
from tuneproof.arch import from_config, resolve
from tuneproof.arch.coverage import NOT_COSTED, OUT_OF_SCOPE, refusal
from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step, flop_report

# hundreds of model builds: left out of mutation runs (the golden ledgers pin the walker there)
pytestmark = pytest.mark.slow  # ~200 tiny builds, four steps each, and the tiny configs' grid
TYPES = causal_lm_types()
TOL = 0.005
CASES = [("forward", False), ("full", False), ("lora", False), ("full", True), ("lora", True)]


def _ratio(
    cfg: dict, batch: int, width: int, mode: str, ckpt: bool, lengths: list[int] | None = None
) -> float:

    shape = from_config(cfg)
    targets = linear_targets(shape)
    counted = counted_flops(
        build_model(cfg), batch, width, mode, lora_rank=4, grad_ckpt=ckpt, lengths=lengths, targets=targets
    )
    run = Step(
        seq_len=width,
        batch=batch,
        attn="eager",
        mode=mode,
        lora_rank=4,
        grad_ckpt=ckpt,
        lora_targets=tuple(targets),
        lengths=tuple(lengths) if lengths else None,
    )
    ours = flop_report(shape, run).performed.total
    assert counted > 0
    return ours / counted


@pytest.mark.parametrize("mode,ckpt", CASES, ids=[f"{m}{'-ckpt' if c else ''}" for m, c in CASES])
@pytest.mark.parametrize("model_type", sorted(TINY))
def test_eager_performed_matches_flop_counter(model_type: str, mode: str, ckpt: bool) -> None:
    ratio = _ratio(config_dict(model_type), batch=2, width=37, mode=mode, ckpt=ckpt)
    assert abs(ratio - 1) < TOL, f"{model_type} {mode} ckpt={ckpt}: ours/counter = {ratio:.5f}"


@pytest.mark.parametrize("width", [1, 15, 16, 17, 53])
def test_widths_around_the_window(width: int) -> None:
    # sliding_window=16 in the tiny configs: below, at and above it
    for model_type in ("mistral", "gemma3_text"):
        ratio = _ratio(config_dict(model_type), batch=3, width=width, mode="full", ckpt=False)
        assert abs(ratio - 1) < TOL, (model_type, width, ratio)


def test_padded_batch_still_matches() -> None:
    # eager computes pad slots like real ones: the performed ledger counts B*T slots
    ratio = _ratio(config_dict("llama"), batch=3, width=29, mode="lora", ckpt=True, lengths=[29, 20, 7])
    assert abs(ratio - 1) < TOL


def test_gemma4_kv_sharing_and_double_wide_mlp() -> None:
    cfg = {"model_type": "gemma4_text", **TINY_GEMMA4_KV_SHARED}
    for mode, ckpt in CASES:
        ratio = _ratio(cfg, batch=2, width=23, mode=mode, ckpt=ckpt)
        assert abs(ratio - 1) < TOL, (mode, ckpt, ratio)


def test_default_grouped_mm_experts_are_invisible_to_flop_counter() -> None:
    """Why the parity tests build MoE models with eager experts: FlopCounterMode in torch 2.13
    counts nothing for grouped_mm, so it undercounts a tiny Gemma 4 MoE forward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = config_dict("gemma4_text")
    config = AutoConfig.for_model("gemma4_text", **{k: v for k, v in cfg.items() if k != "model_type"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(input_ids=torch.randint(0, 200, (2, 37)))
    ours = flop_report(from_config(cfg), Step(seq_len=37, batch=2, attn="eager", mode="forward"))
    experts = ours.performed.by("component")["experts"]
    missing = ours.performed.total - counter.get_total_flops()
    assert missing == pytest.approx(experts, rel=1e-9)


TYPES = causal_lm_types()


@pytest.mark.parametrize("model_type", TYPES)
def test_each_type_is_exact_or_refused_with_its_reason(model_type: str) -> None:
    if model_type in UNVERIFIED:
        pytest.skip(f"not verified: {UNVERIFIED[model_type]} (docs/families.md lists it so)")
    listed = refusal(model_type)
    if listed is not None:  # refused from its model_type alone, before any size is read
        with pytest.raises(TuneproofError) as refused:
            resolve({"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2})
        assert listed in refused.value.message, (model_type, refused.value.message)
        return
    outcome = parity(model_type)
    assert outcome.refused is None, f"{model_type} refused but not listed in coverage: {outcome.refused}"
    assert outcome.exact, f"{model_type}: ours / FlopCounterMode = {outcome.ratios}"


# The goal is 90 % of text decoder types exact; 91 % are (docs/families.md lists the refused ones and
# why). The floor keeps what is reached.
COSTED_FLOOR = 0.90


def test_the_tables_name_only_installed_types_and_costed_share_holds() -> None:
    installed = set(TYPES)
    assert set(OUT_OF_SCOPE) <= installed
    assert set(NOT_COSTED) <= installed
    decoders = [t for t in TYPES if t not in OUT_OF_SCOPE]
    costed = [t for t in decoders if t not in NOT_COSTED]
    share = f"{len(costed)} of {len(decoders)} decoder types costed"
    assert len(costed) >= COSTED_FLOOR * len(decoders), share


def test_docs_families_page_is_current() -> None:
    from pathlib import Path

    page = Path(__file__).resolve().parent.parents[1] / "docs" / "families.md"
    assert page.read_text() == markdown(), "regenerate: python tests/family_parity.py --markdown"
