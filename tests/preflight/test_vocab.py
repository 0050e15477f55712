"""Tokens an Axolotl config adds that the vocabulary lacks (`special_tokens: {pad_token: "<|endoftext|>"}`
on a Llama-3 base, whose vocabulary has no `<|endoftext|>`): Axolotl adds them, the embeddings grow a row
no pretraining trained, and preflight names it when it can read the tokenizer, and says it did not check
when it cannot.

The tokenizer here is a hand-written stand-in for Llama-3's: a word-level vocabulary holding Llama-3's
special tokens (`<|begin_of_text|>`, `<|end_of_text|>`, `<|eot_id|>`, `<|finetune_right_pad_id|>`), not
its 128k BPE; the config is the published Llama-3.2-1B one (tied embeddings) with vocab_size set to the
stand-in's length, so that a new token needs a new row as it does on the real model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import test_preflight
import torch
from test_preflight import DATA, _findings

hub = test_preflight.hub  # the fake Hugging Face cache of the bases' published config.json
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>", "<|eot_id|>"]


def _tokenizer() -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, **{f"w{i}": i + 1 for i in range(50)}}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(LLAMA3_SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"
    )


def _llama3_like(tmp_path: Path, rows: int | None = None) -> Path:
    folder = tmp_path / "llama3-like"
    folder.mkdir()
    tok = _tokenizer()
    tok.save_pretrained(folder)  # type: ignore[attr-defined]
    cfg = json.loads((DATA / "configs" / "llama-3.2-1b.json").read_text())
    cfg["vocab_size"] = rows or len(tok)  # type: ignore[arg-type]
    cfg["bos_token_id"], cfg["eos_token_id"] = tok.bos_token_id, tok.eos_token_id  # type: ignore[attr-defined]
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_the_trap_is_real_the_added_pad_token_gets_a_new_row_in_the_tied_head() -> None:
    """What Axolotl's load_tokenizer and _resize_token_embeddings do, on a tiny tied Llama (transformers
    5.24): one more row, sampled around the old rows' mean, shared by the output head."""
    from tokenizers import AddedToken

    from tiny_models import build_model, config_dict

    tok = _tokenizer()
    model = build_model(config_dict("llama", vocab_size=len(tok), tie_word_embeddings=True))  # type: ignore[arg-type]
    old = model.get_input_embeddings().weight.detach().clone()
    assert "<|endoftext|>" not in tok.get_vocab()  # type: ignore[attr-defined]
    tok.add_special_tokens(
        {"pad_token": AddedToken("<|endoftext|>", rstrip=False, lstrip=False, normalized=False)}
    )  # type: ignore[attr-defined]
    model.resize_token_embeddings(len(tok))  # type: ignore[arg-type]
    new = model.get_input_embeddings().weight
    assert new.shape[0] == old.shape[0] + 1 and tok.pad_token_id == old.shape[0]  # type: ignore[attr-defined]
    torch.testing.assert_close(new[-1].float(), old.float().mean(0), atol=1e-3, rtol=0)
    assert model.get_output_embeddings().weight.data_ptr() == new.data_ptr()  # the head is the same rows


def test_pad_token_endoftext_on_a_llama3_like_base_is_a_finding(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    folder = _llama3_like(tmp_path)
    body = f'base_model: {folder}\nsequence_len: 256\nspecial_tokens:\n  pad_token: "<|endoftext|>"\n'
    code, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    src = str(tmp_path / "r.yml")
    assert code == 1 and d["sections"]["tokens"]["new_tokens"] == ["<|endoftext|>"]
    assert [f for f in d["findings"] if "vocabulary" in f] == [
        f"{src}: special_tokens.pad_token '<|endoftext|>' is not in the tokenizer's vocabulary (55 tokens): "
        "Axolotl adds it and resizes the embeddings from 55 to 56 rows; the new row starts at the old rows' "
        "mean (transformers' mean_resizing; Axolotl's mean_resizing_embeddings unset), a row pretraining "
        "never trained; the output head is tied to the embeddings, so the model can predict it from that "
        "row; the vocabulary holds '<|end_of_text|>', '<|finetune_right_pad_id|>'"
    ]
    lora = body + "adapter: lora\nmean_resizing_embeddings: false\n"
    _, d = _findings(tmp_path, lora, capsys, monkeypatch, hub)
    found = next(f for f in d["findings"] if "vocabulary" in f)
    assert "starts from the model's initializer (mean_resizing_embeddings: false)" in found
    assert "the adapter trains neither embed_tokens nor lm_head (lora_modules_to_save)" in found


def test_the_pad_token_axolotls_llama3_example_sets_is_in_the_vocabulary(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    example = (DATA / "axolotl" / "examples" / "llama-3__lora-1b.yml").read_text()
    assert 'pad_token: "<|end_of_text|>"' in example  # the published line
    body = example.replace("NousResearch/Llama-3.2-1B", str(_llama3_like(tmp_path)))
    _, d = _findings(tmp_path, body.replace("datasets:", "unused_datasets:"), capsys, monkeypatch, hub)
    assert not any("vocabulary" in f for f in d["findings"])
    assert "special_tokens.pad_token '<|end_of_text|>' (id 52)" in d["sections"]["tokens"]["lines"][0]


@pytest.mark.parametrize(
    ("keys", "fragment"),
    [
        ("tokens: ['<tool>']\n", "'`lora_modules_to_save` not properly set when adding new tokens. Please"),
        (
            "special_tokens:\n  eos_token: '<|im_end|>'\n",
            "'Please set lora_modules_to_save to [`embed_tokens`, `lm_head`] when using an adapter and",
        ),
    ],
)
def test_new_tokens_with_an_adapter_quote_axolotls_refusal(
    tmp_path: Path, capsys, monkeypatch, hub, keys: str, fragment: str
) -> None:
    body = f"base_model: {_llama3_like(tmp_path)}\nadapter: lora\n{keys}"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    assert any(fragment in f and "stops at load" in f for f in d["findings"])
    saved = body + "lora_modules_to_save: [embed_tokens, lm_head]\n"
    _, d = _findings(tmp_path, saved, capsys, monkeypatch, hub)
    found = [f for f in d["findings"] if "vocabulary" in f]
    assert len(found) == 1 and "stops at load" not in found[0] and "adapter trains neither" not in found[0]


def test_rows_past_the_tokenizer_take_the_token_without_a_resize(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    folder = _llama3_like(tmp_path, rows=128_256)  # the published vocab_size, the stand-in's 55 tokens
    body = f"base_model: {folder}\nspecial_tokens:\n  pad_token: '<|endoftext|>'\n"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    found = next(f for f in d["findings"] if "vocabulary" in f)
    assert (
        "gives it a row among the embeddings' 128,256 that the tokenizer never produced (no resize)" in found
    )
    assert "old rows' mean" not in found


def test_without_a_tokenizer_nothing_is_guessed(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    body = "base_model: NousResearch/Llama-3.2-1B\nspecial_tokens:\n  pad_token: '<|endoftext|>'\n"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    assert d["sections"]["tokens"]["checked"] is False and not any("vocabulary (" in f for f in d["findings"])
    line = d["sections"]["tokens"]["lines"][0]
    assert line.startswith("1 added or special tokens not checked against the vocabulary: ")
    assert "holds no tokenizer.json or tokenizer.model" in line
    other = body + "tokenizer_config: org/other-tokenizer\n"
    _, d = _findings(tmp_path, other, capsys, monkeypatch, hub)
    assert (
        "tokenizer_config names org/other-tokenizer, which is not a local folder"
        in d["sections"]["tokens"]["lines"][0]
    )
