"""The on-disk cache of resolved models (`tuneproof.arch.cache`): a warm resolve gives the same shape,
notes and ledgers as a cold one without importing torch or transformers; a damaged or foreign entry is
a miss, never an error; the key follows the config, the transformers version and the reader source;
TUNEPROOF_NO_CACHE turns it off."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuneproof.arch import cache, resolve
from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step, flop_report

CONFIGS = Path(__file__).parent.parent / "data" / "configs"
FILES = sorted(p for p in CONFIGS.glob("*.json") if p.name != "params.json")
RUNS = (Step(seq_len=4096, mode="full", grad_ckpt=True), Step(seq_len=1000, mode="lora", batch=2))


@pytest.fixture
def cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TUNEPROOF_CACHE", str(folder))
    monkeypatch.delenv("TUNEPROOF_NO_CACHE", raising=False)
    return folder


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("model-*.pickle")) if folder.is_dir() else []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_warm_resolve_equals_the_cold_one(path: Path, cache_folder: Path) -> None:
    try:
        cold = resolve(path)
    except TuneproofError as e:  # a refusal is never cached: it is given again, the same
        assert _entries(cache_folder) == []
        with pytest.raises(TuneproofError, match=re.escape(e.message)):
            resolve(path)
        return
    assert len(_entries(cache_folder)) == 1
    warm = resolve(path)
    assert warm._config is None and cold._config is not None  # the warm one came from the entry
    assert (warm.shape, warm.notes, warm.max_positions) == (cold.shape, cold.notes, cold.max_positions)
    for run in RUNS:
        assert flop_report(warm.shape, run).to_dict() == flop_report(cold.shape, run).to_dict()
    assert warm.config.to_dict() == cold.config.to_dict()  # read through transformers on first use


def test_a_damaged_entry_is_ignored_and_rewritten(cache_folder: Path) -> None:
    cold = resolve("tiny")
    (entry,) = _entries(cache_folder)
    good = entry.read_bytes()
    for damage in (b"", b"not a pickle", good[: len(good) // 2], pickle.dumps({"format": "other"})):
        entry.write_bytes(damage)
        again = resolve("tiny")
        assert again._config is not None, damage[:20]  # a miss: resolved cold
        assert again.shape == cold.shape
        assert entry.read_bytes() == good  # and written again
    assert resolve("tiny")._config is None


def test_an_entry_naming_other_globals_is_refused_unrun(cache_folder: Path, tmp_path: Path) -> None:
    resolve("tiny")
    (entry,) = _entries(cache_folder)
    key = pickle.loads(entry.read_bytes())["key"]
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (os.system, (f"touch {marker}",))

    entry.write_bytes(pickle.dumps({"format": cache.FORMAT, "key": key, "entry": Evil()}))
    assert cache.load(key) is None
    assert not marker.exists()
    assert resolve("tiny")._config is not None


def test_an_entry_under_another_key_is_a_miss(cache_folder: Path) -> None:
    resolve("tiny")
    (entry,) = _entries(cache_folder)
    payload = pickle.loads(entry.read_bytes())
    payload["key"] = "0" * 64
    entry.write_bytes(pickle.dumps(payload))
    assert resolve("tiny")._config is not None


def test_the_key_follows_config_and_versions_not_key_order() -> None:
    data = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    key = cache.entry_key(data, "5.24.0")
    assert key is not None and len(key) == 64
    assert cache.entry_key(dict(reversed(list(data.items()))), "5.24.0") == key
    assert cache.entry_key(data, "5.25.0") != key
    assert cache.entry_key({**data, "num_hidden_layers": 60}, "5.24.0") != key
    assert cache.entry_key({**data, "rope_theta": 1e6 + 1}, "5.24.0") != key
    assert cache.entry_key({**data, "x": object()}, "5.24.0") is None  # not JSON: not cached
    assert cache.entry_key({**data, "x": float("nan")}, "5.24.0") is None


def test_the_key_follows_the_reader_source(monkeypatch: pytest.MonkeyPatch) -> None:
    data = {"model_type": "llama", "hidden_size": 64}
    key = cache.entry_key(data, "5.24.0")
    monkeypatch.setattr(cache, "source_digest", lambda: "another reader")
    assert cache.entry_key(data, "5.24.0") not in (key, None)
    monkeypatch.setattr(cache, "source_digest", lambda: None)
    assert cache.entry_key(data, "5.24.0") is None


def test_the_version_read_is_the_installed_transformers() -> None:
    import transformers

    assert cache.transformers_version() == transformers.__version__


def test_no_cache_turns_reading_and_writing_off(cache_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEPROOF_NO_CACHE", "1")
    assert not cache.enabled() and cache.key_for({"model_type": "llama"}) is None
    assert resolve("tiny")._config is not None
    assert _entries(cache_folder) == []
    monkeypatch.setenv("TUNEPROOF_NO_CACHE", "0")
    resolve("tiny")
    assert len(_entries(cache_folder)) == 1
    monkeypatch.setenv("TUNEPROOF_NO_CACHE", "1")
    assert resolve("tiny")._config is not None  # an entry exists, but is not read


def test_a_cache_that_cannot_be_written_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TUNEPROOF_CACHE", str(blocker / "cache"))
    assert resolve("tiny").shape.num_layers > 0


def test_a_dict_is_cached_and_a_caller_mutating_it_changes_nothing(cache_folder: Path) -> None:
    data = json.loads((CONFIGS / "llama-3.2-1b.json").read_text())
    cold = resolve(data)
    data["num_hidden_layers"] = 3
    warm = resolve(json.loads((CONFIGS / "llama-3.2-1b.json").read_text()))
    assert warm._config is None and warm.shape == cold.shape
    assert cold.config.num_hidden_layers == warm.config.num_hidden_layers == 16


_WARM = """
import contextlib, io, json, sys
from tuneproof.cli.app import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["flops", "--config", sys.argv[1], "--seq-len", "4096", "--json"])
loaded = sorted(m for m in ("torch", "transformers", "huggingface_hub", "numpy") if m in sys.modules)
print(json.dumps({"code": code, "loaded": loaded, "report": json.loads(out.getvalue())}))
"""


def test_a_warm_command_imports_neither_torch_nor_transformers(cache_folder: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    data = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    config.write_text(json.dumps({**data, "num_hidden_layers": 60, "hidden_size": 4096}))
    env = {**os.environ, "TUNEPROOF_CACHE": str(cache_folder)}
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _WARM, str(config)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for _ in range(2)
    ]
    cold, warm = runs
    assert cold["code"] == warm["code"] == 0
    assert {"torch", "transformers"} <= set(cold["loaded"])
    assert warm["loaded"] == []
    assert warm["report"] == cold["report"]


_WARM_FAMILIES = """
import json, sys
from tuneproof.arch import resolve
from tuneproof.flops import Step, flop_report
hits = {}
for path in sys.argv[1:]:
    model = resolve(path)
    flop_report(model.shape, Step(seq_len=64, mode="full"))
    hits[path] = model._config is None
loaded = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"hits": hits, "loaded": loaded}))
"""
# Families whose mixer core is defined outside shape.py: their entries were once refused on every
# read (the loader allowed shape.py's dataclasses only), so each run took the cold path again.
CORE_FAMILIES = (
    "mamba", "falcon_mamba", "jamba", "rwkv", "lfm2", "minimax", "kimi_linear", "recurrent_gemma",
)  # fmt: skip


def test_families_with_their_own_mixer_cores_hit_warm(cache_folder: Path, tmp_path: Path) -> None:
    from tiny_models import shrunk_config

    paths = []
    for model_type in CORE_FAMILIES:
        path = tmp_path / f"{model_type}.json"
        path.write_text(json.dumps(shrunk_config(model_type).to_dict()))
        assert resolve(path)._config is not None  # cold: writes the entry
        paths.append(str(path))
    env = {**os.environ, "TUNEPROOF_CACHE": str(cache_folder)}
    run = subprocess.run(
        [sys.executable, "-c", _WARM_FAMILIES, *paths], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    warm = json.loads(run.stdout)
    assert warm["hits"] == dict.fromkeys(paths, True) and warm["loaded"] == []
