"""The tokens that train as TRL's SFTTrainer builds them, checked against the batches a real SFTTrainer
collates (its own dataloader: labels[..., 1:] not -100, the count transformers' Trainer divides by),
and each planted fault found, named and counted."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tiny_tokenizers as tt
from tuneproof.labels.report import ModelFacts, check
from tuneproof.labels.rules import LabelRules

pytest.importorskip("trl")


def sft(tmp_path: Path, rows: list[dict[str, Any]], tok: Any, **config: Any) -> Any:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, report_to=[], use_cpu=True,
        save_strategy="no", disable_tqdm=True, **config,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SFTTrainer(
            model=tt.model_for(tok), args=args, train_dataset=Dataset.from_list(rows), processing_class=tok
        )


def collated(trainer: Any, stop: int) -> tuple[int, int]:
    """(tokens that train, stop-token labels that train) over every batch the trainer collates."""
    n = stops = 0
    for batch in trainer.get_train_dataloader():
        t = batch["labels"][..., 1:]
        n += int((t != -100).sum())
        stops += int((t == stop).sum())
    return n, stops


def kinds(report: Any) -> dict[str, int]:
    return {f.kind: f.count for f in report.findings}


ROWS = tt.chats(24, seed=1)
CASES = [  # (style, markers, SFTConfig options)
    ("chatml", True, {}),
    ("chatml", True, {"assistant_only_loss": True}),
    ("llama3", True, {"assistant_only_loss": True}),
    ("llama3", False, {}),
    ("chatml", True, {"assistant_only_loss": True, "max_length": 14}),
    ("llama3", True, {"assistant_only_loss": True, "max_length": 14, "truncation_mode": "keep_end"}),
    ("chatml", True, {"assistant_only_loss": True, "packing": True, "max_length": 24}),
    ("llama3", True, {"packing": True, "packing_strategy": "bfd_split", "max_length": 16}),
]


@pytest.mark.parametrize(("style", "markers", "config"), CASES)
def test_counts_equal_the_batches_a_real_sft_trainer_collates(
    tmp_path: Path, style: str, markers: bool, config: dict[str, Any]
) -> None:
    tok = tt.tokenizer(style, markers)
    rules = LabelRules(
        max_length=config.get("max_length", 1024),
        truncation_mode=config.get("truncation_mode", "keep_start"),
        assistant_only_loss=config.get("assistant_only_loss", False),
        packing=config.get("packing_strategy", "bfd") if config.get("packing") else None,
    )  # fmt: skip
    report = check(ROWS, tok, rules, ModelFacts(), "rows")
    trainer = sft(tmp_path, ROWS, tok, **config)
    n, stops = collated(trainer, tok.eos_token_id)
    assert report.trained == n > 0
    assert report.kept == len(trainer.train_dataset) or rules.packing is not None
    assert (report.stop_rows > 0) == (stops > 0)


def test_a_clean_dataset_gives_no_finding() -> None:
    report = check(
        ROWS, tt.tokenizer("chatml", True), LabelRules(assistant_only_loss=True), ModelFacts(), "rows"
    )
    assert report.findings == []
    assert report.verdict.outcome == "CLEAN"
    assert report.stop_rows == report.kept == len(ROWS)


def test_a_template_without_generation_markers_is_an_all_zero_mask_and_trl_refuses_it(tmp_path: Path) -> None:
    tok = tt.tokenizer("chatml", False)
    report = check(ROWS, tok, LabelRules(assistant_only_loss=True), ModelFacts(), "rows")
    assert kinds(report) == {"trainer_stops": len(ROWS), "assistant_mask_empty": len(ROWS)}
    assert report.trained == 0
    assert "generation" in report.findings[0].text
    with pytest.raises(ValueError, match="not training-compatible"):
        sft(tmp_path, ROWS, tok, assistant_only_loss=True)


def test_answers_truncated_away_are_counted_and_named_as_the_rows_trl_drops(tmp_path: Path) -> None:
    rows = [*ROWS[:6], {"messages": [{"role": "user", "content": tt.WORDS[0] + " w1" * 30},
                                     {"role": "assistant", "content": "w2 w3"}]}]  # fmt: skip
    tok = tt.tokenizer("chatml", True)
    report = check(rows, tok, LabelRules(assistant_only_loss=True, max_length=20), ModelFacts(), "rows")
    lost = next(f for f in report.findings if f.kind == "truncated_away")
    trainer = sft(tmp_path, rows, tok, assistant_only_loss=True, max_length=20)
    assert lost.count == len(rows) - len(trainer.train_dataset) == 1
    assert lost.rows == (7,)
    assert "TRL drops them" in lost.text


def test_an_eos_outside_the_trained_labels_is_found(tmp_path: Path) -> None:
    """A base tokenizer whose EOS (<|end_of_text|>) the template never writes: no label is a stop token,
    in the report and in the real trainer's batches."""
    tok = tt.tokenizer("llama3", True, eos="<|end_of_text|>")
    report = check(ROWS, tok, LabelRules(assistant_only_loss=True), ModelFacts(), "rows")
    assert kinds(report) == {"eos_untrained": len(ROWS)}
    assert "<|eot_id|>" in report.findings[0].text  # where the trained spans end
    n, stops = collated(sft(tmp_path, ROWS, tok, assistant_only_loss=True), tok.eos_token_id)
    assert stops == 0 and n == report.trained


def test_a_stop_token_of_the_generation_config_counts_as_a_stop(tmp_path: Path) -> None:
    tok = tt.tokenizer("llama3", True, eos="<|end_of_text|>")
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    folder = tt.save(tok, tmp_path / "model", stop_ids=[tok.eos_token_id, eot])
    report = check(ROWS, tok, LabelRules(assistant_only_loss=True), ModelFacts.from_folder(folder), "rows")
    assert report.findings == []


def test_an_added_token_past_the_embedding_rows_on_tied_embeddings_is_found(tmp_path: Path) -> None:
    tok = tt.tokenizer("chatml", True, extra=("<tool>",))
    folder = tt.save(tok, tmp_path / "model", rows=len(tok) - 1, tied=True)
    rows = [*ROWS[:5], {"messages": [{"role": "user", "content": "w1 <tool> w2"},
                                     {"role": "assistant", "content": "w3"}]}]  # fmt: skip
    report = check(rows, tok, LabelRules(), ModelFacts.from_folder(folder), "rows")
    found = [f for f in report.findings if f.kind == "added_tokens"]
    assert len(found) == 1 and found[0].count == 1
    assert "<tool>" in found[0].text and "1 example)" in found[0].text and "tied" in found[0].text
    untied = tt.save(tok, tmp_path / "untied", rows=len(tok) - 1, tied=False)
    again = check(rows, tok, LabelRules(), ModelFacts.from_folder(untied), "rows")
    assert "tied" not in next(f for f in again.findings if f.kind == "added_tokens").text


def test_sharegpt_rows_keep_their_roles_under_trl_so_no_assistant_turn_is_masked_in() -> None:
    """Axolotl's own fixture (tests/data/labels): ShareGPT from/value turns, roles human and gpt. TRL
    renames the keys and keeps the roles, so a template that marks the `assistant` role marks none."""
    from tuneproof.labels.rows import read_rows

    rows = read_rows(Path(__file__).parent.parent / "data" / "labels" / "axolotl_conversation.json")
    tok = tt.tokenizer("chatml", True)
    report = check(rows, tok, LabelRules(assistant_only_loss=True, max_length=4096), ModelFacts(), "fixture")
    assert report.built.form == "conversations"
    assert kinds(report) == {"trainer_stops": 1, "nothing_to_train": 1}
    assert "TRL keeps ShareGPT's roles" in report.findings[1].text
    sharegpt = LabelRules(
        trainer="axolotl", max_length=4096, field_messages="conversations", message_keys=("from", "value")
    )
    axolotl = check(rows, tok, sharegpt, ModelFacts(), "fixture")
    assert axolotl.trained > 0 and axolotl.findings == []  # Axolotl maps gpt to assistant


@pytest.mark.parametrize("name", ["llama3_1", "qwen3", "gemma3", "gptoss"])
def test_stock_templates_mask_no_assistant_token_and_trl_swaps_or_refuses(name: str) -> None:
    """The stock chat templates TRL ships (trl/chat_templates) have no generation markers: the mask
    apply_chat_template returns is all zero. TRL swaps in a training version of those it knows and
    refuses Llama 3.1's."""
    import trl

    template = (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()
    tok = tt.tokenizer("chatml", True)
    tok.chat_template = template
    rows = ROWS[:4]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = tok.apply_chat_template([r["messages"] for r in rows], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)  # fmt: skip
    assert not any(np.asarray(m).any() for m in raw["assistant_masks"])
    report = check(rows, tok, LabelRules(assistant_only_loss=True), ModelFacts(), "rows")
    if name == "llama3_1":
        assert "trainer_stops" in kinds(report)
    else:
        assert report.built.template is not None and report.trained > 0
        assert "trainer_stops" not in kinds(report)


def test_prompt_completion_rows_train_the_completion_only(tmp_path: Path) -> None:
    tok = tt.tokenizer("chatml", True)
    rows = [{"prompt": "w1 w2 w3", "completion": " w4 w5"}, {"prompt": "w6", "completion": " w7 w8 w9"}] * 4
    report = check(rows, tok, LabelRules(), ModelFacts(), "rows")
    n, stops = collated(sft(tmp_path, rows, tok), tok.eos_token_id)
    assert report.trained == n == 4 * (3 + 4)  # the completion and its appended EOS
    assert stops == report.stop_rows == len(rows)


def test_text_rows_get_their_eos_appended_as_trl_does(tmp_path: Path) -> None:
    tok = tt.tokenizer("chatml", True)
    rows = [{"text": "w1 w2 w3"}, {"text": "w4 w5 <|im_end|>"}] * 3
    report = check(rows, tok, LabelRules(), ModelFacts(), "rows")
    n, _ = collated(sft(tmp_path, rows, tok), tok.eos_token_id)
    assert report.trained == n == 3 * (3 + 2)
    assert report.stop_rows == len(rows)


def test_bad_rules_are_refused_naming_the_field() -> None:
    from tuneproof.core.errors import TuneproofError

    with pytest.raises(TuneproofError, match="packing"):
        LabelRules(packing="spiral")
    with pytest.raises(TuneproofError, match="max_length"):
        LabelRules(packing="bfd", max_length=None)
    with pytest.raises(TuneproofError, match="max_length"):
        LabelRules(max_length=0)


def test_a_template_that_refuses_a_row_is_named_by_the_row() -> None:
    """raise_exception in a template (roles must alternate, as Mistral's and Gemma's templates say)
    stops TRL's preparation: the check names the row, in one line."""
    from tuneproof.core.errors import TuneproofError

    tok = tt.tokenizer("chatml", True)
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'user' and loop.index0 % 2 == 1 %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
        "{% endif %}{{ m['content'] }} {% endfor %}"
    )
    rows = [  # no system turn in these three: their user turns come first
        ROWS[1],
        ROWS[2],
        ROWS[4],
        {"messages": [{"role": "assistant", "content": "w1"}, {"role": "user", "content": "w2"}]},
    ]
    with pytest.raises(TuneproofError, match=r"row 4: the chat template cannot render it .*must alternate"):
        check(rows, tok, LabelRules(), ModelFacts(), "rows")


@pytest.mark.parametrize(
    ("trainer", "rows", "said"),
    [
        ("trl", [ROWS[0], {"messages": 5}], "row 2: 'messages' is int, not a list of turns"),
        ("transformers", [ROWS[0], {"messages": [1, 2]}], "row 2: 'messages' is list, not a list of turns"),
        ("trl", [{"text": 5}], "row 1: no chat 'messages'"),
        ("trl", [{"text": "w1"}, {"text": None}], "row 2: text field 'text' is NoneType, not text"),
        ("axolotl", [ROWS[0], {"messages": "hello"}], "row 2: no list of turns under 'messages'"),
    ],
)
def test_a_row_the_trainer_cannot_read_is_refused_by_its_row(
    trainer: str, rows: list[Any], said: str
) -> None:
    from tuneproof.core.errors import TuneproofError

    rules = LabelRules(trainer=trainer, max_length=64) if trainer != "trl" else LabelRules()
    with pytest.raises(TuneproofError, match=re.escape(said)):
        check(rows, tt.tokenizer("chatml", True), rules, ModelFacts(), "rows")


def test_a_row_without_an_assistant_turn_is_nothing_to_train_not_an_empty_mask() -> None:
    rows = [*ROWS[:3], {"messages": [{"role": "user", "content": "w1 w2"}]}]
    report = check(
        rows, tt.tokenizer("chatml", True), LabelRules(assistant_only_loss=True), ModelFacts(), "r"
    )
    assert kinds(report) == {"trainer_stops": 4, "nothing_to_train": 1}
    assert report.findings[1].rows == (4,)
    assert "1 example has no token" in report.findings[1].text


def test_a_clean_verdict_claims_no_more_than_it_checked() -> None:
    report = check(ROWS, tt.tokenizer("chatml", True), LabelRules(max_length=12), ModelFacts(), "rows")
    assert report.findings == [] and report.verdict.reason == "no finding about the tokens that train"
    assert report.stop_rows < report.kept  # truncated rows lose their EOS: a line, not a finding
