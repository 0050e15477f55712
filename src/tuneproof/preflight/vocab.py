"""The tokens an Axolotl config adds (`special_tokens`, `tokens`) against the vocabulary of the tokenizer
Axolotl loads, read from its local folder; a tokenizer that cannot be read is said to be unchecked, with
the reason, and nothing is guessed.

What Axolotl 0.19 and transformers 5.24 do with a token the vocabulary lacks:
- `load_tokenizer` (loaders/tokenizer.py) adds it: `add_special_tokens` for bos/eos/pad/unk_token and
  additional_special_tokens, `add_tokens` for `tokens`. With an adapter, a changed bos/eos/unk_token
  that encodes to more than 2 pieces stops the load unless lora_modules_to_save lists the embedding
  layers ("Please set lora_modules_to_save to [...] when using an adapter and changing the special
  tokens."); pad_token is exempt. `tokens` with an adapter stop it the same way
  (loaders/utils.py check_model_config: "`lora_modules_to_save` not properly set when adding new
  tokens.").
- `_resize_token_embeddings` (loaders/model.py) resizes the embeddings to len(tokenizer) (rounded up
  to 32 with resize_token_embeddings_to_32x) when they have fewer rows, passing mean_resizing only when
  mean_resizing_embeddings is set; transformers' `resize_token_embeddings` defaults to mean_resizing,
  which samples the new rows around the old rows' mean (covariance scaled by 1e-9), else initialises
  them as the model's initializer does. An untied output head is resized the same way.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from tuneproof.preflight.sections import Section
from tuneproof.runs.run import Run, TokenEdits

# Axolotl's get_linear_embedding_layers (loaders/utils.py): the modules lora_modules_to_save must list
EMBEDDING_LAYERS = {
    "gpt_neox": ("embed_in", "embed_out"),
    "falcon": ("word_embeddings", "lm_head"),
    "nemotron_h": ("embeddings", "lm_head"),
}
DEFAULT_EMBEDDING_LAYERS = ("embed_tokens", "lm_head")


def tokenizer_folder(run: Run, base_folder: Path | None) -> tuple[Path | None, str | None]:
    """The folder of the tokenizer Axolotl loads (tokenizer_config, else the base's), or why there is
    none to read here."""
    name = run.tokens.tokenizer
    if name is None or name == run.base_model.split("@")[0]:
        return base_folder, None
    path = Path(name).expanduser()
    if path.is_dir():
        return path, None
    return None, f"tokenizer_config names {name}, which is not a local folder: not read"


def tokens(run: Run, tokenizer: Any, why_not: str | None, model: Any, model_type: str) -> Section | None:
    """The added tokens the vocabulary lacks, each a finding with what happens to its embedding row;
    None when the config adds no token."""
    edits = run.tokens
    if not edits.asked:
        return None
    s = Section(name="tokens", data={"checked": tokenizer is not None})
    if tokenizer is None:
        s.lines.append(
            f"{len(edits.asked)} added or special tokens not checked against the vocabulary: {why_not}"
        )
        return s
    vocab = tokenizer.get_vocab()
    new = list(dict.fromkeys(text for _, text in edits.asked if text not in vocab))
    s.data["new_tokens"] = list(new)
    known = [f"{key} {text!r} (id {vocab[text]})" for key, text in edits.asked if text in vocab]
    if known:
        s.lines.append("in the vocabulary: " + ", ".join(known))
    if not new:
        return s
    rows, tied = model.shape.vocab_size, model.shape.tie_word_embeddings
    length = len(tokenizer) + len(new)
    target = -(-length // 32) * 32 if edits.resize_to_32x else length
    growth = (
        f"resizes the embeddings from {rows:,} to {target:,} rows"
        if target > rows
        else f"gives it a row among the embeddings' {rows:,} that the tokenizer never produced (no resize)"
    )
    s.data.update(rows=rows, rows_after=max(rows, target), tied=tied)
    s.lines.append(
        f"not in the vocabulary ({len(tokenizer):,} tokens): {', '.join(repr(t) for t in new)}; embeddings "
        f"{rows:,} -> {max(rows, target):,} rows" + (", tied to the output head" if tied else "")
    )
    layers = EMBEDDING_LAYERS.get(model_type, DEFAULT_EMBEDDING_LAYERS)
    saved = all(m in edits.modules_to_save for m in layers)
    for key, text in edits.asked:
        if text in new:
            s.findings.append(_finding(run, key, text, tokenizer, growth, target > rows, tied, saved, layers))
            new.remove(text)  # one finding per token, at its first key
    return s


def _finding(
    run: Run, key: str, text: str, tok: Any, growth: str, resized: bool, tied: bool, saved: bool,
    layers: tuple[str, ...],
) -> str:  # fmt: skip
    edits: TokenEdits = run.tokens
    out = (
        f"{run.source}: {key} {text!r} is not in the tokenizer's vocabulary ({len(tok):,} tokens): "
        f"Axolotl adds it and {growth}"
    )
    if resized:
        out += (
            "; the new row starts at the old rows' mean (transformers' mean_resizing; Axolotl's "
            "mean_resizing_embeddings unset)"
            if edits.mean_resizing is not False
            else "; the new row starts from the model's initializer (mean_resizing_embeddings: false)"
        )
    out += ", a row pretraining never trained"
    if tied:
        out += "; the output head is tied to the embeddings, so the model can predict it from that row"
    stops = _axolotl_stops(run, key, text, tok, saved, layers)
    if stops:
        out += f"; {stops}"
    elif run.adapter and not saved:
        out += (
            f"; the adapter trains neither {' nor '.join(layers)} (lora_modules_to_save), so the row "
            "stays as initialised"
        )
    near = _in_vocab(text, key, tok)
    return out + (f"; the vocabulary holds {', '.join(repr(n) for n in near)}" if near else "")


def _axolotl_stops(
    run: Run, key: str, text: str, tok: Any, saved: bool, layers: tuple[str, ...]
) -> str | None:
    """Axolotl 0.19's refusal of this token with an adapter, in its own words, or None."""
    if not run.adapter or saved:
        return None
    need = ", ".join(f"`{m}`" for m in layers)
    if key == "tokens":
        return (
            "with an adapter Axolotl 0.19 stops at load: '`lora_modules_to_save` not properly set when "
            f"adding new tokens. Please include [{need}] in `lora_modules_to_save`.'"
        )
    name = key.removeprefix("special_tokens.")
    if name == "pad_token" or name not in ("bos_token", "eos_token", "unk_token"):
        return None
    if len(tok.encode(text, add_special_tokens=False)) <= 2:  # Axolotl's own test, verbatim
        return None
    return (
        f"with an adapter Axolotl 0.19 stops at load: 'Please set lora_modules_to_save to [{need}] when "
        "using an adapter and changing the special tokens.'"
    )


def _in_vocab(text: str, key: str, tok: Any) -> list[str]:
    """The vocabulary's added tokens nearest `text` (and, for pad_token, those naming a pad)."""
    added = list(tok.get_added_vocab())
    near = difflib.get_close_matches(text, added, n=1, cutoff=0.6)
    if key.endswith("pad_token"):
        near += [t for t in added if "pad" in t.lower() and t not in near][:2]
    return near
