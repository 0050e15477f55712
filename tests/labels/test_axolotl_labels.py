"""The labels modelled for Axolotl's chat_template datasets equal, token for token, what Axolotl 0.19's
own ChatTemplateStrategy builds: roles_to_train, train_on_inputs, train_on_eos (turn, all, last, none),
an instruct tokenizer (EOS = the template's end of turn) and a base one (EOS never in the template).
Run by `make test-axolotl` (Axolotl's own venv); skipped where Axolotl is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tiny_tokenizers as tt
from tuneproof.labels.report import ModelFacts, check
from tuneproof.labels.rules import LabelRules

pytest.importorskip("axolotl")

ROWS = [
    *tt.chats(30, seed=3),
    {"messages": [{"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w3"},
                  {"role": "user", "content": "w4"}, {"role": "assistant", "content": "w5 w6"}]},
    {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "w8 w9"}]},
]  # fmt: skip
SHAREGPT = {
    "field_messages": "conversations",
    "message_property_mappings": {"role": "from", "content": "value"},
}
OPTIONS: list[dict[str, Any]] = [
    {}, {"train_on_inputs": True}, {"train_on_eos": "all"}, {"train_on_eos": "last"},
    {"train_on_eos": "none"}, {"roles_to_train": ["user", "assistant"]},
]  # fmt: skip


@pytest.mark.parametrize(("style", "eos"), [("llama3", None), ("llama3", "<|end_of_text|>"), ("chatml", None),
                                            ("chatml", "<|endoftext|>")])  # fmt: skip
@pytest.mark.parametrize("opts", OPTIONS)
def test_labels_equal_axolotls_own(style: str, eos: str | None, opts: dict[str, Any]) -> None:
    from axolotl.prompt_strategies.chat_template import load
    from axolotl.utils.dict import DictDefault

    tok = tt.tokenizer(style, False, eos=eos)
    cfg = DictDefault({"train_on_inputs": opts.get("train_on_inputs", False), "sequence_len": 4096,
                       "chat_template": "tokenizer_default"})  # fmt: skip
    strategy = load(tok, cfg, {k: v for k, v in opts.items() if k != "train_on_inputs"})
    rules = LabelRules(
        trainer="axolotl", max_length=4096, train_on_inputs=opts.get("train_on_inputs", False),
        roles_to_train=tuple(opts.get("roles_to_train", ["assistant"])),
        train_on_eos=opts.get("train_on_eos", "turn"),
    )  # fmt: skip
    report = check(ROWS, tok, rules, ModelFacts(), "rows")
    for i, row in enumerate(ROWS):
        theirs = strategy.tokenize_prompt(row)
        assert np.array_equal(report.built.ids[i], theirs["input_ids"]), i
        assert np.array_equal(report.built.labels[i], theirs["labels"]), i
    if eos is not None and opts.get("train_on_eos") != "all":
        assert "eos_untrained" in {f.kind for f in report.findings}


def test_sharegpt_rows_read_through_message_property_mappings() -> None:
    """Axolotl's own fixture (tests/data/labels), read as its docs configure ShareGPT rows."""
    from axolotl.prompt_strategies.chat_template import load
    from axolotl.utils.dict import DictDefault

    from tuneproof.labels.rows import read_rows

    rows = read_rows(Path(__file__).parent.parent / "data" / "labels" / "axolotl_conversation.json")
    tok = tt.tokenizer("chatml", False)
    cfg = DictDefault({"train_on_inputs": False, "sequence_len": 4096, "chat_template": "tokenizer_default"})
    theirs = load(tok, cfg, SHAREGPT).tokenize_prompt(rows[0])
    rules = LabelRules(
        trainer="axolotl", max_length=4096, field_messages="conversations", message_keys=("from", "value")
    )
    report = check(rows, tok, rules, ModelFacts(), "fixture")
    assert np.array_equal(report.built.labels[0], theirs["labels"]) and report.trained > 0
