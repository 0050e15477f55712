"""The library and the command tell one story for tokens: the library result's `to_dict()` is exactly
what `tuneproof tokens --json` prints, for a dataset and for an Axolotl config that names its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tiny_tokenizers as tt
from tuneproof.cli.app import main
from tuneproof.core.io import dumps


def _json(capsys: Any, *argv: Any) -> tuple[int, Any]:
    code = main(["tokens", *(str(a) for a in argv), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_tokens_json_is_the_library_result(tmp_path: Path, capsys) -> None:
    from tuneproof.commands.tokens import TokensSpec, prepare, run
    from tuneproof.labels.rules import LabelRules

    folder = tt.save(tt.tokenizer("chatml", True), tmp_path / "model")
    data = tt.write_jsonl(tt.chats(12), tmp_path / "chats.jsonl")
    code, printed = _json(capsys, data, "--tokenizer", folder, "--assistant-only-loss", "--max-length", 16)
    spec = TokensSpec(
        source=data, tokenizer=folder, rules=LabelRules(assistant_only_loss=True, max_length=16)
    )
    result = run(prepare(spec))
    assert json.loads(dumps(result.to_dict())) == printed
    assert code == printed["exit_code"] == 1
    one = printed["datasets"][0]
    assert one["trained_tokens"] == result.reports[0].trained > 0
    assert {f["kind"] for f in one["findings"]} == {"truncated_away"}


def test_an_axolotl_config_is_read_with_its_own_tokenizer_and_options(tmp_path: Path, capsys) -> None:
    """A base model whose EOS the template never writes, through the run's own YAML: the EOS finding,
    and train_on_eos all does not save it (the EOS is not in the text)."""
    folder = tt.save(tt.tokenizer("llama3", False, eos="<|end_of_text|>"), tmp_path / "base")
    tt.write_jsonl(tt.chats(10), tmp_path / "chats.jsonl")
    run = tmp_path / "run.yml"
    run.write_text(
        f"base_model: {folder}\nsequence_len: 512\ndatasets:\n  - path: {tmp_path / 'chats.jsonl'}\n"
        "    type: chat_template\n    roles_to_train: [assistant]\n"
        "  - path: org/hub-set\n    type: alpaca\n"
    )
    assert main(["tokens", str(run), "--json"]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert [d["rules"]["trainer"] for d in printed["datasets"]] == ["axolotl"]
    assert printed["skipped"] == [
        {"dataset": "org/hub-set", "why": "not a local file (nothing is downloaded)"}
    ]
    assert [f["kind"] for f in printed["datasets"][0]["findings"]] == ["eos_untrained"]
    assert main(["tokens", str(run), "--max-length", "64"]) == 2
    assert "a run config gives its own tokenizer and trainer options" in capsys.readouterr().err


def test_sharegpt_rows_of_an_axolotl_config_read_through_its_mappings(tmp_path: Path, capsys) -> None:
    folder = tt.save(tt.tokenizer("chatml", False), tmp_path / "base")
    rows = [{"conversations": [{"from": "human", "value": "w1 w2"}, {"from": "gpt", "value": "w3 w4"}]}] * 3
    data = tt.write_jsonl(rows, tmp_path / "sharegpt.jsonl")
    run = tmp_path / "run.yml"
    run.write_text(
        f"base_model: {folder}\nsequence_len: 64\ndatasets:\n  - path: {data}\n    type: chat_template\n"
        "    field_messages: conversations\n    message_property_mappings: {role: from, content: value}\n"
    )
    assert main(["tokens", str(run), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["datasets"][0]
    assert d["trained_tokens"] == 3 * 3 and d["kept"] == 3  # w3 w4 and the <|im_end|> after, each row
    assert d["rules"]["message_keys"] == ["from", "value"] and "truncation_mode" not in d["rules"]


def test_a_run_config_that_names_what_is_not_there_is_refused(tmp_path: Path, capsys) -> None:
    folder = tt.save(tt.tokenizer("chatml", True), tmp_path / "base")
    run = tmp_path / "run.yml"
    run.write_text(f"base_model: {tmp_path / 'nope'}\nsequence_len: 64\n")
    assert main(["tokens", str(run)]) == 2
    assert "base_model " + str(tmp_path / "nope") + " is no local folder" in capsys.readouterr().err
    run.write_text(f"base_model: {folder}\nsequence_len: 64\ndatasets:\n  - path: ./nope.jsonl\n")
    assert main(["tokens", str(run)]) == 2
    assert "dataset ./nope.jsonl not found" in capsys.readouterr().err
    assert main(["tokens", str(run), "--trainer", "trl"]) == 2  # the default, given: still refused, by name
    assert "--trainer: a run config gives its own tokenizer and trainer options" in capsys.readouterr().err


def test_the_json_carries_the_numbers_the_text_shows(tmp_path: Path, capsys) -> None:
    tok = tt.tokenizer("chatml", True, extra=("<tool>",))
    folder = tt.save(tok, tmp_path / "model", rows=len(tok) - 1, tied=True)
    rows = tt.chats(6, user=(3, 4), answer=(2, 3))
    rows[2]["messages"][-2]["content"] = " ".join(["w1"] * 40)
    rows[4]["messages"][-1]["content"] += " <tool>"
    data = tt.write_jsonl(rows, tmp_path / "chats.jsonl")
    _, printed = _json(capsys, data, "--tokenizer", folder, "--assistant-only-loss", "--max-length", 30)
    d = printed["datasets"][0]
    assert d["longer_than_limit"] == 1 and (d["tokenizer_tokens"], d["embedding_rows"]) == (
        len(tok),
        len(tok) - 1,
    )
    found = {f["kind"]: f for f in d["findings"]}
    assert found["truncated_away"]["rows"] == [3] and found["truncated_away"]["tokens"] > 0
    assert found["added_tokens"]["rows"] == [5]
