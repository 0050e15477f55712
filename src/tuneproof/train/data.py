"""The dataset of a training run, read and checked before any model loads: JSONL, Parquet or a saved
`datasets` folder (or the tiny corpus shipped with tuneproof), text rows or chat rows (`messages`),
every row checked; text rows tokenised and truncated to the recipe's max_length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.runs.recipe import TINY, Recipe

TINY_CORPUS = Path(__file__).parent / "tiny_corpus.jsonl"


def read_records(recipe: Recipe) -> list[dict[str, Any]]:
    """The dataset's rows, checked before any model loads: it exists, and its rows have the text field,
    or all have chat `messages`."""
    path = TINY_CORPUS if recipe.data.path == TINY else Path(recipe.data.path)
    records = _records(path)
    if not records:
        raise TuneproofError(f"dataset {path} is empty", "pass a dataset with rows")
    field = recipe.data.text_field
    if is_chat(records):
        for i, rec in enumerate(records, 1):
            _check_chat(path, i, rec, recipe.data.assistant_only_loss)
        return records
    for i, rec in enumerate(records, 1):
        if isinstance(rec.get(field), str):
            continue
        if isinstance(rec.get("messages"), list):
            raise TuneproofError(
                f"{path}: row {i} is a chat ('messages'), but row 1 is text",
                "make every row a chat ('messages') or every row text",
            )
        if field in rec:
            raise TuneproofError(
                f"{path}: row {i}'s {field!r} is {type(rec[field]).__name__}, not text",
                "set data.text_field to a column of strings (chat rows go under 'messages')",
            )
        keys = ", ".join(sorted(rec)) or "none"
        raise TuneproofError(
            f"{path}: row {i} has no text field {field!r} and no chat 'messages' (its keys: {keys})",
            "set data.text_field to the column holding the text",
        )
    return records


def _check_chat(path: Path, i: int, rec: dict[str, Any], assistant_only: bool) -> None:
    """A chat row: a non-empty list of {role, content} turns of strings; with assistant-only loss, at
    least one assistant turn (else the row has nothing to learn)."""
    turns = rec.get("messages")
    fix = 'every row\'s \'messages\' is a list of {"role": ..., "content": ...} turns'
    if not isinstance(turns, list):
        raise TuneproofError(f"{path}: row {i} has no chat 'messages' list, but row 1 has one",
                             "make every row a chat ('messages') or every row text")  # fmt: skip
    if not turns:
        raise TuneproofError(f"{path}: row {i}'s 'messages' is empty", fix)
    for j, turn in enumerate(turns, 1):
        ok = (
            isinstance(turn, dict)
            and isinstance(turn.get("role"), str)
            and isinstance(turn.get("content"), str)
        )
        if not ok:
            shown = sorted(turn) if isinstance(turn, dict) else type(turn).__name__
            raise TuneproofError(f"{path}: row {i}, turn {j} is not a {{role, content}} pair of strings "
                                 f"(it has: {shown})", fix)  # fmt: skip
    if assistant_only and not any(t["role"] == "assistant" for t in turns):
        raise TuneproofError(
            f"{path}: row {i} has no assistant turn: with data.assistant_only_loss nothing in it trains",
            "add the assistant's reply, drop the row, or set data.assistant_only_loss = false",
        )


def is_chat(records: list[dict[str, Any]]) -> bool:
    """Chat rows (`messages`, trained through TRL's SFTTrainer) rather than text rows."""
    return isinstance(records[0].get("messages"), list)


def tokenise(records: list[dict[str, Any]], recipe: Recipe, tokenizer: Any) -> list[dict[str, list[int]]]:
    """Token ids per text row with the EOS appended when the text does not end with it (as TRL's
    SFTTrainer does: a model fine-tuned on text that never trains its EOS never learns to stop),
    truncated to max_length. Rows without the text field, or shorter than 2 tokens, are dropped; a
    dataset left empty is refused."""
    field = recipe.data.text_field
    eos = getattr(tokenizer, "eos_token", None) or ""
    rows = []
    for rec in records:
        if not isinstance(rec.get(field), str):
            continue
        text = rec[field] if rec[field].endswith(eos) else rec[field] + eos
        ids = list(tokenizer(text)["input_ids"])[: recipe.data.max_length]
        if len(ids) >= 2:
            rows.append({"input_ids": ids})
    if not rows:
        raise TuneproofError(
            f"dataset {recipe.data.path} holds no usable text", "pass a dataset with text in it"
        )
    return rows


def check_chat_template(tokenizer: Any, recipe: Recipe) -> None:
    """Chat rows need a chat template; assistant-only loss needs one with `{% generation %}` markers or
    one TRL knows a training version of (its `get_training_chat_template`)."""
    if not getattr(tokenizer, "chat_template", None):
        raise TuneproofError(
            f"the tokenizer of {recipe.model.name} has no chat template for the chat rows",
            "give the tokenizer a chat_template, or train on a text field",
        )
    if not recipe.data.assistant_only_loss:
        return
    from trl.chat_template_utils import get_training_chat_template

    try:
        get_training_chat_template(tokenizer)
    except ValueError:
        raise TuneproofError(
            f"the chat template of {recipe.model.name} has no {{% generation %}} markers and TRL knows no "
            "training version of it, so the loss cannot be kept to the assistant's turns",
            "set data.assistant_only_loss = false to train on whole conversations, or add the markers",
        ) from None


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise TuneproofError(
            f"dataset {path} not found", "set data.path to a JSONL, Parquet or saved datasets folder"
        )
    if path.is_dir():
        try:
            from datasets import load_from_disk

            return [dict(r) for r in load_from_disk(str(path))]
        except Exception as e:  # not a saved dataset folder: say what it is not
            raise TuneproofError(
                f"{path} is not a saved datasets folder: {str(e)[:200]}", "pass a JSONL file"
            ) from None
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            return [dict(r) for r in pq.read_table(path).to_pylist()]
        except Exception as e:
            raise TuneproofError(
                f"cannot read {path} as Parquet: {str(e)[:200]}", "pass a valid Parquet file"
            ) from None
    from tuneproof.gate.inputs import jsonl_objects

    return [row for _, row in jsonl_objects(path, "the dataset", "set data.path to a JSONL file")]
