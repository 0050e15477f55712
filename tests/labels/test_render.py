"""The fast render-and-encode path gives what `apply_chat_template(..., return_assistant_tokens_mask=True)`
gives, ids and masks, for both templates and for messages with None-valued keys."""

from __future__ import annotations

import numpy as np
import pytest

import tiny_tokenizers as tt
from tuneproof.labels.render import CHUNK, chat_ids, fast


@pytest.mark.parametrize(("style", "masks"), [("chatml", True), ("llama3", True), ("llama3", False)])
def test_the_fast_path_equals_apply_chat_template(style: str, masks: bool) -> None:
    tok = tt.tokenizer(style, True)
    chats = [r["messages"] for r in tt.chats(CHUNK + 7, seed=5)]  # two chunks
    chats[3] = [{"role": "user", "content": "w1", "name": None}, {"role": "assistant", "content": "w2"}]
    assert fast(tok)
    ids, got = chat_ids(tok, chats, None, masks)
    want = tok.apply_chat_template(chats, tokenize=True, return_dict=True, return_assistant_tokens_mask=masks)
    assert [x.tolist() for x in ids] == want["input_ids"]
    if masks:
        assert [m.astype(int).tolist() for m in got] == want["assistant_masks"]
        assert any(m.any() for m in got)


def test_a_tokenizer_set_to_truncate_goes_through_apply_chat_template() -> None:
    tok = tt.tokenizer("chatml", True)
    tok._tokenizer.enable_truncation(8)
    assert not fast(tok)
    ids, masks = chat_ids(tok, [r["messages"] for r in tt.chats(3)], None, True)
    assert len(ids) == 3 and all(m.dtype == np.bool_ for m in masks)
