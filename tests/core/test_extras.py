"""A command whose extra is missing names the extra, in one line, before any work."""

from __future__ import annotations

import importlib.util

import pytest

from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require


def test_a_missing_extra_is_named_with_its_pip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in ("peft", "trl") else real(n, *a)
    )
    with pytest.raises(TuneproofError) as one:
        require("train", "a LoRA probe", ("peft",))
    assert (
        one.value.message
        == "a LoRA probe needs peft, which is not installed (pip install 'tuneproof[train]')"
    )
    with pytest.raises(TuneproofError) as two:
        require("train", "tuneproof train")
    assert two.value.message.startswith("tuneproof train needs peft, trl, which are not installed")
    require("train", "accelerate alone", ("accelerate",))  # installed: no error


def test_the_train_command_names_its_extra_before_anything_is_written(monkeypatch, tmp_path, capsys) -> None:
    from tuneproof.cli.app import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "trl" else real(n, *a))
    assert main(["train", "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'tuneproof[train]'" in err
    assert not (tmp_path / "run").exists()


def test_tokens_names_the_train_extra_for_trls_assistant_only_rules(monkeypatch, tmp_path, capsys) -> None:
    """TRL's assistant-only rules ask TRL whether it swaps in a training template: without TRL the
    command says so before reading the dataset; the rules that need no TRL still run."""
    import tiny_tokenizers as tt
    from tuneproof.cli.app import main

    folder = tt.save(tt.tokenizer("chatml", True), tmp_path / "tok")
    data = tt.write_jsonl(tt.chats(3), tmp_path / "chats.jsonl")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "trl" else real(n, *a))
    assert main(["tokens", str(data), "--tokenizer", str(folder), "--assistant-only-loss"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs trl" in err and "pip install 'tuneproof[train]'" in err
    assert main(["tokens", str(data), "--tokenizer", str(folder)]) == 0
