"""The library and the command tell one story for tokens: the library result's `to_dict()` is exactly
what `tuneproof tokens --json` prints, for a dataset and for an Axolotl config that names its own."""

from __future__ import annotations

import json
from pathlib import Path

import tiny_tokenizers as tt
from tuneproof.cli.app import main
from tuneproof.core.io import dumps


def test_tokens_json_is_the_library_result(tmp_path: Path, capsys) -> None:
    from tuneproof.commands.tokens import TokensSpec, prepare, run
    from tuneproof.labels.rules import LabelRules

    folder = tt.save(tt.tokenizer("chatml", True), tmp_path / "model")
    data = tt.write_jsonl(tt.chats(12), tmp_path / "chats.jsonl")
    argv = [
        "tokens",
        str(data),
        "--tokenizer",
        str(folder),
        "--assistant-only-loss",
        "--max-length",
        "16",
        "--json",
    ]
    code = main(argv)
    printed = json.loads(capsys.readouterr().out)
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
