"""Proof that packed documents stay apart: one packed row run packed and document by document through a
real transformers model, logits compared. The traps are shown real first (a row without position_ids
restarts, a 2-D mask sent with a packed row, a model whose own forward hides packing, a linear-attention
layer whose state runs across the row), then the check is shown to call each of them, and to say
"isolated" where transformers keeps the documents apart (SDPA's packed mask, flex's BlockMask, eager)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from tiny_models import config_dict
from tuneproof.arch import resolve
from tuneproof.arch.small import small_copy
from tuneproof.attention.isolation import Isolation, check_isolation, cut_row, packed_row
from tuneproof.attention.packed_detection import packed_detection
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError
from tuneproof.measure.model import build_model

CONFIGS = Path(__file__).parents[1] / "data" / "configs"
DOCS = (40, 56, 32)


def _model(config: Any, attn: str) -> Any:
    model = resolve(config)
    return build_model(resolve(small_copy(model).config), attn)


def _logits(model: Any, **kwargs: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(**kwargs, use_cache=False).logits


def test_the_trap_is_real_a_row_without_restarts_lets_document_two_see_document_one() -> None:
    """Independent of the check: the second document's logits, packed without position_ids restarts,
    differ from the same tokens run alone; with restarts they match."""
    import torch

    model = _model(config_dict("llama"), "sdpa").eval()
    row = packed_row(DOCS, 256)
    alone = _logits(model, input_ids=row["input_ids"][:, 40:96])
    restarted = _logits(model, **row)[:, 40:96]
    flat = _logits(model, input_ids=row["input_ids"], position_ids=torch.arange(128)[None])[:, 40:96]
    assert float((restarted - alone).abs().max()) < 1e-4
    assert float((flat - alone).abs().max()) > 1e-2


@pytest.mark.parametrize("attn", ["sdpa", "eager", "flex_attention"])
def test_transformers_packed_masks_keep_documents_apart(attn: str) -> None:
    """SDPA with transformers' packed mask, eager, flex with its document BlockMask: isolated, on a
    Gemma-4-style model (sliding and global layers, windows narrowed so they bite inside the row)."""
    result = check_isolation(_model("tiny", attn), DOCS)
    assert result.isolated, result.summary()
    assert result.summary().startswith("isolated (max |dlogit|") and result.layer is None
    assert max(result.diffs) < result.tolerance / 10  # far inside: the packed and alone runs agree


@pytest.mark.parametrize("attn", ["sdpa", "flex_attention"])
@pytest.mark.parametrize("leak", ["no-restarts", "2d-mask"])
def test_a_planted_leak_is_caught_and_placed(attn: str, leak: str) -> None:
    result = check_isolation(_model(config_dict("llama"), attn), DOCS, leak=leak)
    assert not result.isolated
    assert result.diffs[0] <= result.tolerance < result.diffs[1]  # the first document sees nothing before it
    assert result.summary().startswith("documents 2 and 3 attend to the documents before them from layer 0")
    assert f"planted leak: {leak}" in result.summary()
    d = result.as_dict()
    assert d["isolated"] is False and d["first_layer"] == 0 and d["planted_leak"] == leak
    assert d["attending"] == [2, 3]


def test_a_model_whose_forward_hides_packing_leaks_and_is_named() -> None:
    """transformers 5.24's GptOssModel.forward builds its masks without position_ids: packed rows are
    never detected, on eager too. The source reading and the live check agree; Llama's forward passes
    them and stays apart."""
    gpt_oss, llama = packed_detection("gpt_oss"), packed_detection("llama")
    assert gpt_oss is not None and not gpt_oss.masks_get_positions and gpt_oss.layers_get_positions
    assert llama is not None and llama.masks_get_positions and llama.blind("eager") == ""
    assert gpt_oss.blind("flash_attention_2") == ""  # flash reads position_ids in the layers
    result = check_isolation(_model(config_dict("gpt_oss"), "eager"), DOCS)
    assert not result.isolated
    assert "GptOssModel.forward builds its masks without position_ids" in result.summary()
    assert check_isolation(_model(config_dict("llama"), "eager"), DOCS).isolated


def test_the_source_reading_covers_the_families_people_fine_tune() -> None:
    hidden = {"gpt_oss", "granitemoehybrid"}
    for model_type in ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "gemma3_text",
                       "gemma4_text", "mixtral", "deepseek_v3", "qwen3_next", "olmo3", *hidden):  # fmt: skip
        found = packed_detection(model_type)
        assert found is not None, model_type
        assert found.masks_get_positions == (model_type not in hidden), model_type
    assert packed_detection("opt") is None  # OPTModel wraps a decoder: nothing read, nothing claimed


def test_a_linear_attention_layer_carries_its_state_across_documents() -> None:
    """Qwen3.5's gated delta rule runs one state over the whole row on the CPU (no cu_seq_lens, no
    fla kernel): the leak is placed at its first linear-attention layer, and said to be a state."""
    result = check_isolation(_model(CONFIGS / "qwen3.5-27b.json", "sdpa"), DOCS)
    assert not result.isolated and result.layer_kind == "linear"
    assert "a recurrent state" in result.summary()


def test_the_small_copy_keeps_every_layer_kind() -> None:
    gemma = small_copy(resolve("examples/gemma4-26b-a4b-like/config.json"))
    assert gemma.layers == 6 and gemma.config["layer_types"][-1] == "full_attention"
    assert gemma.config["sliding_window"] == 48 and gemma.config["num_attention_heads"] == 4
    assert gemma.config["num_global_key_value_heads"] == 2 and gemma.config["head_dim"] == 256
    shape = resolve(gemma.config).shape
    assert {x.attention.kind for x in shape.layers} == {"sliding", "full"}
    assert {x.attention.head_dim for x in shape.layers} == {256, 512}
    nxt = small_copy(resolve(CONFIGS / "qwen3-next-80b-a3b.json"))
    assert nxt.layers == 4 and {x.attention.kind for x in resolve(nxt.config).shape.layers} == {
        "linear",
        "full",
    }
    wide = small_copy(resolve(CONFIGS / "granite-4.0-1b.json"), narrow=False)
    assert wide.config["hidden_size"] == 2048 and wide.config["vocab_size"] == 512


def test_a_real_row_is_cut_to_the_budget_keeping_two_documents() -> None:
    import torch

    batch = {
        "input_ids": torch.arange(300)[None],
        "position_ids": torch.cat([torch.arange(250), torch.arange(50)])[None],
    }
    docs, row = cut_row(batch, 0, (250, 50), 128)
    assert docs == (64, 50)
    assert row["input_ids"][0, 63] == 63 and row["input_ids"][0, 64] == 250
    assert row["position_ids"][0, 64] == 0 and set(row) == {"input_ids", "position_ids"}


def test_bad_input_is_one_error() -> None:
    model = _model(config_dict("llama"), "sdpa")
    for docs, leak in (((40,), None), ((40, 0), None), ((40, 8), "other")):
        with pytest.raises(TuneproofError):
            check_isolation(model, docs, leak=leak)
    with pytest.raises(TuneproofError, match="positions"):
        check_isolation(_model(config_dict("llama", max_position_embeddings=32), "sdpa"), (40, 8))


def test_explain_live_says_isolated_or_names_the_leak(capsys) -> None:
    assert main(["explain", "--seq-len", "2048", "--packed", "--live", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["isolation"]["isolated"] and d["verdict"]["outcome"] == "ISOLATED"
    assert "every kind it has (full, sliding)" in d["isolation"]["model"]
    gpt_oss = ["explain", "--config", str(CONFIGS / "gpt-oss-20b.json"), "--seq-len", "2048", "--packed"]
    assert main([*gpt_oss, "--attn", "eager", "--live"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "packed documents, live" in out and "documents 2 and 3 attend to the documents before them" in out
    assert "pack only on flash_attention_2" in out and "run in fp32 on this machine's CPU" in out
    assert "--live' runs the proof" not in out  # the note's pointer to the check it has just run
    # without --live: the same finding, read from the model's forward (exit 1 too)
    assert main([*gpt_oss, "--attn", "eager", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"]["outcome"] == "ATTEND" and "GptOssModel.forward" in d["verdict"]["reason"]


def test_explain_live_refuses_before_building(capsys) -> None:
    assert main(["explain", "--seq-len", "2048", "--live"]) == 2
    assert capsys.readouterr().err.startswith("error: --live checks packed documents")
    config = str(CONFIGS / "gemma-2-9b-it.json")
    assert main(["explain", "--config", config, "--seq-len", "2048", "--packed", "--live"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "transformers will not run sdpa for gemma2" in err


def test_the_explainer_says_what_keeps_packed_documents_apart_on_every_path(capsys) -> None:
    """Without --live: the path's own rule on a model that lets transformers see packing, the model's
    forward named where it does not (and the layers explained as one sequence per row)."""
    from contexts import context
    from tuneproof.attention.dispatch import explain

    tiny = resolve("tiny").shape
    words_of = {"sdpa": "per-document mask", "eager": "per-document mask",
                "flex_attention": "per-document mask", "flash_attention_2": "varlen boundaries"}  # fmt: skip
    for attn, words in words_of.items():
        notes = explain(tiny, context(seq_len=1024, batch=1, attn=attn, packed=True)).notes
        assert any(n.startswith(f"packed documents kept apart on {attn}") and words in n for n in notes)
    two = explain(tiny, context(seq_len=1024, batch=2, attn="flash_attention_2", packed=True)).notes
    assert any("at 2 rows a batch only from cu_seq_lens_q/k" in n for n in two)
    granite = resolve(CONFIGS / "granite-4.0-1b.json").shape
    e = explain(granite, context(seq_len=1024, batch=1, attn="sdpa", packed=True))
    assert any("GraniteMoeHybridModel.forward builds its masks without position_ids" in n for n in e.notes)
    assert e.verdict is not None and e.verdict.exit_code == 1
    assert e.advice[0].startswith("pack only on flash_attention_2 with a collator that sends cu_seq_lens_q")
    assert not any(x.mask_materialised for x in e.layers)  # one causal row: SDPA keeps is_causal


def test_an_isolation_summary_names_the_documents() -> None:
    three = Isolation(attn="sdpa", docs=(10, 10, 10), diffs=(0.0, 0.0, 0.5), tolerance=1e-3)
    assert three.summary().startswith("document 3 attends to documents 1-2 (max |dlogit| 0.5")
    four = Isolation(attn="sdpa", docs=(10, 10, 10, 10), diffs=(0.0, 0.2, 0.0, 0.5), tolerance=1e-3)
    assert four.summary().startswith(
        "documents 2 and 4 attend to the documents before them (max |dlogit| 0.5"
    )


def test_a_path_that_cannot_run_here_cannot_be_judged(capsys) -> None:
    """gpt-oss's attention sinks do not run on flex on the CPU (transformers raises at the forward), and
    flash_attention_2 needs flash-attn and CUDA: exit 3 in one line, no traceback, no verdict."""
    config = str(CONFIGS / "gpt-oss-20b.json")
    args = ["explain", "--config", config, "--seq-len", "2048", "--packed", "--live"]
    assert main([*args, "--attn", "flex_attention"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "error: the model does not run a packed row on flex_attention"
    )
    assert main([*args, "--attn", "flash_attention_2"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "flash_attention_2 needs the flash-attn package" in err
