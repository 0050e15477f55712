"""The labels of transformers' `Trainer` fed by its `DataCollatorForLanguageModeling(mlm=False)`, the
plain path (transformers 5.24, data/data_collator.py): every token is its own label, and every label
equal to the tokenizer's pad id is set to -100 (`labels[labels == pad_token_id] = -100`), padding and
real tokens alike, so with pad == eos no EOS ever trains. Text rows are tokenised as
`tokenizer(text, truncation=True, max_length=...)` (the tokenizer adds what its post-processor adds,
often BOS and no EOS); chat rows are rendered with the chat template and cut at `max_length`. Nothing
is dropped: an example with no label left trains nothing, and a micro-batch of such examples gives a
NaN loss.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tuneproof.labels.render import chat_ids
from tuneproof.labels.rules import IGNORE, Built, LabelRules, empty, trained
from tuneproof.labels.trl import chatml, check_rows, form_of


def build(rows: list[dict[str, Any]], tok: Any, rules: LabelRules) -> Built:
    form = form_of(rows[0], rules.text_field)
    check_rows(rows, form, rules.text_field)
    out = empty(len(rows), form)
    out.notes.append("as transformers' DataCollatorForLanguageModeling (mlm=False) labels them")
    if form in ("messages", "conversations"):
        if not getattr(tok, "chat_template", None):
            out.stops.append("the tokenizer has no chat template for the chat rows")
            return out
        ids: list[Any] = chat_ids(tok, [chatml(r[form]) for r in rows], None, False)[0]
    elif form == "text":
        texts = [r[rules.text_field] for r in rows]
        ids = tok(texts)["input_ids"]
    else:
        out.stops.append(f"rows of the form {form} are not text or chats for the plain Trainer")
        return out
    pad = tok.pad_token_id
    n = rules.max_length
    long = [i for i, x in enumerate(ids) if n is not None and len(x) > n]
    cut: dict[int, Any] = {}
    if long and form == "text":  # truncation=True keeps what the post-processor adds (an EOS, a SEP)
        short = tok([texts[i] for i in long], truncation=True, max_length=n)["input_ids"]
        cut = dict(zip(long, short, strict=True))
    for i, raw in enumerate(ids):
        x = np.asarray(raw, dtype=np.int64)
        out.length[i], out.trained_before[i] = x.size, trained(_labels(x, pad))
        if n is not None and x.size > n:
            x = np.asarray(cut[i], dtype=np.int64) if i in cut else x[:n]
        out.ids[i], out.labels[i] = x, _labels(x, pad)
    return out


def _labels(x: np.ndarray, pad: int | None) -> np.ndarray:
    return x.copy() if pad is None else np.where(x == pad, IGNORE, x)
