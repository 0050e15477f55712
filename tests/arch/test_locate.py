"""Configs from where users keep them: a hub id (`owner/name[@revision]`) is read from the local
Hugging Face cache, built here as huggingface_hub lays it out (models--owner--name/refs/<revision>
holding a commit, snapshots/<commit>/config.json), never downloaded; an existing local path wins."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tiny_models import config_dict
from tuneproof.arch import load_config_dict, resolve
from tuneproof.arch.locate import HubId, hub_cache_dir, hub_id
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError

LLAMA = config_dict("llama", intermediate_size=128, max_position_embeddings=512)
MAIN, V1 = "a" * 40, "b" * 40


def _cache(root: Path, repo: str = "owner/name") -> Path:
    """A hub cache holding `repo` at two revisions: main (2 layers) and the tag v1 (3 layers)."""
    folder = root / ("models--" + repo.replace("/", "--"))
    for ref, commit, layers in (("main", MAIN, 2), ("v1", V1, 3)):
        (folder / "refs").mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)  # huggingface_hub writes the commit, no newline
        snapshot = folder / "snapshots" / commit
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": layers}))
    return root


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(_cache(tmp_path / "hub")))
    return tmp_path / "hub"


def test_hub_ids_are_what_huggingface_hub_accepts() -> None:
    assert hub_id("meta-llama/Llama-3.2-1B") == HubId("meta-llama/Llama-3.2-1B")
    assert hub_id("owner/name@v1") == HubId("owner/name", "v1")
    assert hub_id("gpt2") == HubId("gpt2")  # a legacy id without an owner
    for path in ("/abs/missing.json", "./name", "a/b/c", "../x", "owner/name@", "a--b/c"):
        assert hub_id(path) is None, path


def test_the_cache_folder_is_read_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub_cache_dir() == tmp_path / "elsewhere"


def test_a_hub_id_is_read_from_the_cache(hub: Path) -> None:
    assert load_config_dict("owner/name")["num_hidden_layers"] == 2
    assert resolve("owner/name").shape.num_layers == 2


def test_a_revision_is_a_ref_or_a_commit(hub: Path) -> None:
    assert load_config_dict("owner/name@v1")["num_hidden_layers"] == 3
    assert load_config_dict(f"owner/name@{V1}")["num_hidden_layers"] == 3
    assert load_config_dict("owner/name@main")["num_hidden_layers"] == 2


def test_hf_home_is_used_without_hf_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cache(tmp_path / "hf" / "hub")
    assert load_config_dict("owner/name@v1")["num_hidden_layers"] == 3


def test_an_existing_local_path_wins(hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "work" / "owner" / "name"
    local.mkdir(parents=True)
    (local / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 5}))
    monkeypatch.chdir(tmp_path / "work")
    assert load_config_dict("owner/name")["num_hidden_layers"] == 5


def test_not_cached_names_the_cache_and_never_downloads(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(TuneproofError) as missing:
        load_config_dict("owner/other")
    assert missing.value.exit_code == 2
    assert f"the Hugging Face cache {hub} holds no models--owner--other" in missing.value.message
    assert "pass the folder holding its config.json" in missing.value.message
    with pytest.raises(TuneproofError) as revision:
        load_config_dict("owner/name@v9")
    assert "holds no config.json for revision 'v9'" in revision.value.message


def test_the_command_reads_a_hub_id(hub: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flops", "--config", "owner/name", "--seq-len", "128", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["model_type"] == "llama" and printed["intended"]["total"] > 0
    assert main(["flops", "--config", "owner/other", "--seq-len", "128", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: config not found: owner/other") and err.count("\n") == 1
    assert str(hub) in err and "Traceback" not in err


def test_ship_commands_read_a_hub_id_too(hub: Path) -> None:
    from tuneproof.ship.layout import read_config

    assert read_config(Path("owner/name@v1"), "config")["num_hidden_layers"] == 3


def test_a_path_no_file_system_holds_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flops", "--config", "a" * 5000, "--seq-len", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the config path (5000 characters) cannot be read") and err.count("\n") == 1
