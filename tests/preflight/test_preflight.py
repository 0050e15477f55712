"""`tuneproof preflight` on Axolotl's own example configs (tests/data/axolotl/examples, provenance in
SOURCES.md) with a fake Hugging Face cache holding the published config.json of their base models, and
on configs written here for each rule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tuneproof.cli.app import main

DATA = Path(__file__).parent.parent / "data"
EXAMPLES = sorted((DATA / "axolotl" / "examples").glob("*.y*ml"))
BASES = {  # base_model -> its published config.json in tests/data/configs
    "google/gemma-4-26B-A4B": "gemma-4-26b-a4b.json",
    "nvidia/Gemma-4-26B-A4B-NVFP4": "gemma-4-26b-a4b-nvfp4.json",
    "NousResearch/Meta-Llama-3.1-8B": "llama-3.1-8b.json",
    "NousResearch/Llama-3.2-1B": "llama-3.2-1b.json",
    "mistralai/Mistral-7B-v0.1": "mistral-7b-v0.1.json",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b.json",
    "Qwen/Qwen3.5-35B-A3B-Base": "qwen3.5-35b-a3b.json",
    "Qwen/Qwen3-32B": "qwen3-32b.json",
    "openai/gpt-oss-20b": "gpt-oss-20b.json",
}
SNAPSHOT = "0" * 40


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("hub")
    for repo, name in BASES.items():
        folder = cache / ("models--" + repo.replace("/", "--"))
        (folder / "snapshots" / SNAPSHOT).mkdir(parents=True)
        shutil.copy(DATA / "configs" / name, folder / "snapshots" / SNAPSHOT / "config.json")
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(SNAPSHOT)
    return cache


def _preflight(args: list[str], capsys, monkeypatch, hub: Path) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("COLUMNS", "200")
    code = main(["preflight", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_axolotl_example_is_checked_or_refused_in_one_line(
    example: Path, capsys, monkeypatch, hub
) -> None:
    code, out, err = _preflight([str(example)], capsys, monkeypatch, hub)
    assert "Traceback" not in out + err
    if code == 2:  # refused: only a base model the fake cache does not hold
        assert err.count("\n") == 1 and "holds no models--" in err, err
        assert example.read_text().split("base_model:")[1].split()[0] not in BASES
    else:
        assert code in (0, 1) and out.splitlines()[-1].startswith("verdict: "), out


@pytest.mark.parametrize(
    "name", ["gemma4__26b-a4b-moe-qlora@08fc7de87.yaml", "gemma4__26b-a4b-moe-qlora@149178ddb.yaml"]
)
def test_the_gemma4_sdp_attention_examples_name_the_head_dim_512_layers_and_the_mask(
    name: str, capsys, monkeypatch, hub
) -> None:
    example = DATA / "axolotl" / "examples" / name
    code, out, _ = _preflight([str(example), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert code == 1 and d["run"]["attn_implementation"] == "sdpa"
    layers = {x["layer_type"]: x for x in d["sections"]["dispatch"]["layers"]}
    assert layers["full"]["head_dim"] == 512 and layers["full"]["mask_materialised"]
    assert "packed batch" in layers["full"]["mask_reason"]  # what packing does to the mask
    assert layers["sliding"]["head_dim"] == 256 and "kv_length" in layers["sliding"]["mask_reason"]
    assert any("> 128 on the memory-efficient backend" in f for f in d["findings"])


def test_gpt_oss_packs_apart_on_its_flash_kernel_and_not_on_eager(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    """transformers 5.24's GptOssModel.forward builds its masks without position_ids: Axolotl's example on
    flash_attention_2 (which reads position_ids in the layers) keeps documents apart, the same run on eager
    (Axolotl drops the mask for it, and would for sdpa) lets them attend to each other: a finding."""
    example = DATA / "axolotl" / "examples" / "gpt-oss__gpt-oss-20b-sft-lora-singlegpu.yaml"
    flash = tmp_path / "flash.yaml"
    flash.write_text(example.read_text().replace("kernels-community/vllm-flash-attn3", "flash_attention_2"))
    _, out, _ = _preflight([str(flash), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    assert not any("attend to each other" in f for f in json.loads(out)["findings"])
    eager = tmp_path / "eager.yaml"
    eager.write_text(example.read_text().replace("kernels-community/vllm-flash-attn3", "eager"))
    code, out, _ = _preflight([str(eager), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert code == 1 and d["run"]["attn_implementation"] == "eager"
    assert any(f.startswith("attention: pack only on flash_attention_2 (it reads the packed position_ids")
               for f in d["findings"])  # fmt: skip
    assert any("GptOssModel.forward builds its masks without position_ids" in n
               for n in d["sections"]["dispatch"]["lines"])  # fmt: skip


def test_the_hybrid_gives_sliding_layers_flash_and_global_layers_sdpa(capsys, monkeypatch, hub) -> None:
    example = DATA / "axolotl" / "examples" / "gemma4__26b-a4b-moe-qlora.yaml"
    _, out, _ = _preflight([str(example), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert d["run"]["gemma4_hybrid_attn_impl"] and d["run"]["attn_implementation"] == "flash_attention_2"
    layers = {x["layer_type"]: x for x in d["sections"]["dispatch"]["layers"]}
    assert "flash" in layers["sliding"]["backend"] and not layers["sliding"]["mask_materialised"]
    assert layers["full"]["mask_materialised"]  # SDPA with the block-diagonal mask of the packed row
    assert d["sections"]["flops"]["rows"] == 1 and d["sections"]["flops"]["width"] == 2048  # one packed row
    lora = d["sections"]["lora"]
    assert lora["tower_modules_adapted"] == 0 and lora["families"]["q_proj"] == 30  # the regex's text layers
    assert len(lora["expert_parameters_adapted"]) == 60


def test_qwen3_moe_without_target_parameters_leaves_the_experts_out(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    body = (
        "base_model: Qwen/Qwen3.5-35B-A3B-Base\nadapter: lora\nlora_target_linear: true\nsequence_len: 1024\n"
    )
    code, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    assert code == 1 and any("routed experts" in f and "get no adapter" in f for f in d["findings"])


def test_a_regex_that_matches_nothing_and_an_unknown_key_are_findings(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    run = tmp_path / "r.yml"
    run.write_text(
        "base_model: NousResearch/Llama-3.2-1B\nadapter: lora\n"
        "lora_target_modules: 'model.language_model.*q_proj'\nsequence_length: 2048\n"
    )
    code, out, _ = _preflight([str(run)], capsys, monkeypatch, hub)
    assert code == 1
    assert (
        "line 4: sequence_length is no Axolotl 0.19.0 option: Axolotl drops it (did you mean sequence_len?)"
        in out
    )
    assert "adapts no module of this model: the adapter would train nothing" in out


def test_flex_with_shuffled_padding_passes_the_recompile_limit(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    body = "base_model: NousResearch/Llama-3.2-1B\nattn_implementation: flex_attention\nsequence_len: 4096\n"
    code, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    assert d["sections"]["recompile"]["widths"] == 64 and code == 1
    assert any("recompile_limit of 8" in f for f in d["findings"])
    _, d = _findings(tmp_path, body + "sample_packing: true\n", capsys, monkeypatch, hub)
    assert d["sections"]["recompile"]["widths"] == 1


@pytest.mark.parametrize(
    "body,fragment",
    [
        ("attn_implementation: flash\n", "'flash' is a short form Axolotl refuses"),
        (
            "attn_implementation: sdpa\nflash_attention: true\n",
            "are both set (Axolotl 0.19 refuses the two together)",
        ),
        ("attn_implementation: sdpa\ngemma4_hybrid_attn_impl: true\n", "needs flash_attention_2, not sdpa"),
        ("attn_implementation: magic\n", "'magic' is not one Axolotl takes"),
        ("micro_batch_size: 0\n", "micro_batch_size = 0 must be at least 1"),
        ("lora_target_modules: '(['\n", "the regex does not compile"),
        ("datasets: {path: x}\n", "datasets must be a list"),
        ('sample_packing: "true"\n', "sample_packing is the string 'true'"),
        ('gradient_checkpointing: "false"\n', "gradient_checkpointing is the string 'false'"),
        ("gradient_checkpointing: offlaod\n", "write true or false or offload or offload_disk"),
        ("adapter: qlora\n", "adapter qlora without load_in_4bit: true"),
        ("num_epochs: -1\n", "num_epochs = -1 must be a number above 0"),
        ("special_tokens: ['<pad>']\n", "line 2: special_tokens must be a mapping"),
        ("special_tokens:\n  pad_token: 0\n", "special_tokens.pad_token must be a string"),
        ("tokens: '<tool>'\n", "line 2: tokens must be a list of strings"),
        (
            "adapter: lora\nload_in_4bit: true\nload_in_8bit: true\n",
            "load_in_4bit and load_in_8bit are both true",
        ),
    ],
)
def test_bad_axolotl_values_are_one_line(
    tmp_path: Path, capsys, monkeypatch, hub, body: str, fragment: str
) -> None:
    run = tmp_path / "r.yml"
    run.write_text("base_model: NousResearch/Llama-3.2-1B\n" + body)
    code, _, err = _preflight([str(run)], capsys, monkeypatch, hub)
    assert code == 2 and fragment in err and err.count("\n") == 1, err


def test_a_key_given_twice_is_read_as_axolotl_reads_it(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    """Axolotl's load_cfg is PyYAML's safe_load, which keeps a key's last value without a word: the run is
    costed at that value, and each key given more than once (nested ones too) is a finding naming every
    value and the one Axolotl uses."""
    import yaml

    assert yaml.safe_load("sequence_len: 2048\nsequence_len: 8192\n") == {"sequence_len": 8192}  # the trap
    body = (
        "base_model: NousResearch/Llama-3.2-1B\nsequence_len: 2048\nmicro_batch_size: 1\nsequence_len: 8192\n"
        "datasets:\n  - path: org/set\n    type: alpaca\n    type: completion\nsequence_len: 1024\n"
    )
    code, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    assert code == 1 and d["run"]["sequence_len"] == 1024 and d["sections"]["flops"]["width"] == 1024
    src = str(tmp_path / "r.yml")
    assert d["findings"][:2] == [
        f"{src}, line 8: datasets[0].type is given twice (line 7: 'alpaca', line 8: 'completion'): "
        "Axolotl's loader (PyYAML safe_load) keeps the last, 'completion'; keep the one you mean",
        f"{src}, line 9: sequence_len is given 3 times (line 2: 2048, line 4: 8192, line 9: 1024): "
        "Axolotl's loader (PyYAML safe_load) keeps the last, 1024; keep the one you mean",
    ]
    _, d = _findings(
        tmp_path, "base_model: NousResearch/Llama-3.2-1B\nsequence_len: 512\n", capsys, monkeypatch, hub
    )
    assert not any("is given" in f for f in d["findings"])


def test_a_recipe_key_given_twice_is_still_refused(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    """TOML forbids a key given twice and tuneproof train refuses it: preflight refuses it too."""
    recipe = tmp_path / "r.toml"
    recipe.write_text('[model]\nname = "NousResearch/Llama-3.2-1B"\nname = "NousResearch/Llama-3.2-1B"\n')
    code, _, err = _preflight([str(recipe)], capsys, monkeypatch, hub)
    assert code == 2 and "Cannot overwrite a value (at line 3" in err and err.count("\n") == 1


def test_a_tuneproof_recipe_is_read_as_train_will_run_it(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        '[model]\nname = "NousResearch/Llama-3.2-1B"\n[data]\nmax_length = 1024\n[lora]\nr = 8\n'
    )
    code, out, _ = _preflight([str(recipe), "--json"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert d["kind"] == "recipe" and d["run"]["lora_r"] == 8 and d["sections"]["flops"]["width"] == 1024
    assert code in (0, 1)


def _local_model(tmp_path: Path) -> Path:
    """A llama config and a word-level tokenizer in a folder: a base with real token lengths."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "base"
    folder.mkdir()
    cfg = json.loads((DATA / "configs" / "llama-3.2-1b.json").read_text())
    (folder / "config.json").write_text(json.dumps(cfg))
    vocab = {"[UNK]": 0, **{f"w{i}": i + 1 for i in range(50)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_local_datasets_give_real_lengths_padding_and_the_wall_time(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    folder = _local_model(tmp_path)
    rows = [{"text": " ".join(f"w{j % 50}" for j in range(n))} for n in [20, 900, 30, 700, 25, 1000] * 20]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "r.yml"
    run.write_text(
        f"base_model: {folder}\nsequence_len: 1024\nmicro_batch_size: 2\n"
        f"datasets:\n  - path: {data}\n    type: completion\n  - path: org/hub-set\n    type: alpaca\n"
    )
    code, out, _ = _preflight([str(run), "--json", "--fit", "6.87e-4,8.85e-8"], capsys, monkeypatch, hub)
    d = json.loads(out)
    b = d["sections"]["batches"]
    assert b["rows"] == 120 and b["longest"] == 1000 and b["padding"] > 0.3
    assert any(f.startswith("padding:") for f in d["findings"]) and code == 1
    assert any("org/hub-set: not a local file: a hub dataset, not read" in n for n in d["notes"])
    assert d["sections"]["wall time"]["micro_batches"] == 60 and d["sections"]["wall time"]["seconds"] > 0
    run.write_text(run.read_text().replace("sequence_len: 1024", "sequence_len: 1024\nsample_packing: true"))
    code, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    assert json.loads(out)["sections"]["batches"]["padding"] < 0.2


def test_the_library_call_for_a_loaded_config(monkeypatch, hub) -> None:
    from tuneproof.commands.preflight import PreflightSpec, prepare, run

    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    loaded = {"base_model": "NousResearch/Llama-3.2-1B", "sequence_len": 512}
    result = run(prepare(PreflightSpec(config=loaded, source="loaded")))
    assert result.verdict.outcome in ("CLEAN", "FINDINGS") and isinstance(result.findings, list)
    assert result.to_dict()["sections"]["flops"]["width"] == 512


def test_the_docs_example_prints_what_the_page_shows(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(DATA.parent.parent)
    assert main(["preflight", "examples/preflight/gemma4-26b-a4b-sdpa.yml", "--gpu", "H100"]) == 1
    page = (DATA.parent.parent / "docs" / "preflight.md").read_text()
    start = page.index("```\npreflight examples/preflight/gemma4-26b-a4b-sdpa.yml") + 4
    assert capsys.readouterr().out == page[start : page.index("```", start)]


def test_the_ledgers_price_the_compiled_model_the_dispatch_explains(monkeypatch) -> None:
    """torch_compile changes the masks transformers builds, and the dispatch section says so; the FLOP
    and memory ledgers price that same step (issue 47: they priced the model uncompiled, so the docs'
    example showed 63.8 TFLOP performed where its own dispatch section explained 65.3)."""
    import yaml

    from tuneproof.commands.preflight import PreflightSpec, prepare, run

    monkeypatch.chdir(DATA.parent.parent)
    config = yaml.safe_load(Path("examples/preflight/gemma4-26b-a4b-sdpa.yml").read_text())

    def priced(compiled: bool) -> tuple[float, int]:
        got = run(prepare(PreflightSpec(config=dict(config, torch_compile=compiled), gpu="H100"))).to_dict()
        return got["sections"]["flops"]["performed"]["total"], got["sections"]["memory"]["peak_bytes"]

    (flops_on, peak_on), (flops_off, peak_off) = priced(True), priced(False)
    assert flops_on > flops_off and peak_on > peak_off  # the full layers' masks, built under compile


def test_a_malformed_local_dataset_is_one_line_and_a_parquet_one_is_named(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    folder = _local_model(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "w1 w2"}\n{oops\n')
    run = tmp_path / "r.yml"
    run.write_text(
        f"base_model: {folder}\nsequence_len: 256\ndatasets:\n  - path: {bad}\n    type: completion\n"
    )
    code, _, err = _preflight([str(run)], capsys, monkeypatch, hub)
    assert code == 2 and "bad.jsonl, line 2: not JSON" in err and err.count("\n") == 1
    parquet = tmp_path / "d.parquet"
    parquet.write_bytes(b"PAR1")
    run.write_text(f"base_model: {folder}\nsequence_len: 256\ndatasets:\n  - path: {parquet}\n")
    code, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    assert code in (0, 1) and any(
        "only JSON and JSONL files are read here" in n for n in json.loads(out)["notes"]
    )


def test_flash_attention_on_gemma4_names_the_head_dim_512_layers_it_cannot_run(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    run = tmp_path / "r.yml"
    run.write_text("base_model: google/gemma-4-26B-A4B\nflash_attention: true\nsequence_len: 4096\n")
    code, out, _ = _preflight([str(run), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    wide = [f for f in d["findings"] if "past flash-attn's 256" in f]
    assert code == 1 and len(wide) == 1 and "the 5 full layers have head_dim 512" in wide[0]
    run.write_text(run.read_text() + "gemma4_hybrid_attn_impl: true\n")
    code, out, _ = _preflight([str(run), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    assert not any("past flash-attn" in f for f in json.loads(out)["findings"])


def _findings(tmp_path: Path, body: str, capsys, monkeypatch, hub, *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    run = tmp_path / "r.yml"
    run.write_text(body)
    code, out, err = _preflight([str(run), "--json", *extra], capsys, monkeypatch, hub)
    assert code in (0, 1), err
    return code, json.loads(out)


def test_findings_for_runs_axolotl_accepts_but_do_not_do_what_they_say(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    llama = "base_model: NousResearch/Llama-3.2-1B\n"
    _, d = _findings(tmp_path, llama + "adapter: lorax\n", capsys, monkeypatch, hub)
    assert any("adapter 'lorax' is not lora or qlora" in f for f in d["findings"])
    _, d = _findings(tmp_path, llama + "gemma4_hybrid_attn_impl: true\n", capsys, monkeypatch, hub)
    assert any("this model has no sliding layers" in f for f in d["findings"])
    _, d = _findings(
        tmp_path, llama + "adapter: lora\nlora_target_modules: [q_proj, qq_proj]\n", capsys, monkeypatch, hub
    )
    assert any("target(s) qq_proj match no module" in f for f in d["findings"])
    code, d = _findings(
        tmp_path, llama + "adapter: lora\nlora_target_modules: [qq_proj]\n", capsys, monkeypatch, hub
    )
    assert code == 1 and any("adapts no module of this model" in f for f in d["findings"])
    _, d = _findings(tmp_path, llama + "datasets:\n  - path: ./data/train.jsonl\n", capsys, monkeypatch, hub)
    assert any("./data/train.jsonl: no such file from this folder" in f for f in d["findings"])
    many = llama + "".join(f"unknown_{i}: 1\n" for i in range(30))
    _, d = _findings(tmp_path, many, capsys, monkeypatch, hub)
    assert (
        sum("is no Axolotl" in f for f in d["findings"]) == 20
        and "... and 10 more options" in d["findings"][-1]
    )
    _, d = _findings(tmp_path, llama + "attn_implementation: xformers\n", capsys, monkeypatch, hub)
    assert (
        d["sections"]["dispatch"]["layers"] == []
        and "dispatch unknown" in d["sections"]["dispatch"]["lines"][0]
    )


def test_the_hybrid_raises_no_sliding_layer_advice(capsys, monkeypatch, hub) -> None:
    example = DATA / "axolotl" / "examples" / "gemma4__26b-a4b-moe-qlora.yaml"
    _, out, _ = _preflight([str(example), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    assert not any("sliding layers compute the full" in f for f in json.loads(out)["findings"])


def test_qwen35_experts_are_the_expert_tensors_only(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    body = "base_model: Qwen/Qwen3.5-35B-A3B-Base\nadapter: lora\nlora_target_linear: true\n"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    experts = next(f for f in d["findings"] if "routed experts" in f)
    assert "conv1d" not in experts and "80 fused expert tensors" in experts


def test_a_capability_names_the_card_and_an_empty_one_is_refused(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    body = "base_model: NousResearch/Llama-3.2-1B\n"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub, "--gpu", "9.0")
    assert d["sections"]["flex"]["capability"] == [9, 0]
    code, _, err = _preflight([str(tmp_path / "r.yml"), "--gpu", ""], capsys, monkeypatch, hub)
    assert code == 2 and "--gpu is empty" in err


def test_a_fit_without_lengths_gives_the_micro_batch_time(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    body = "base_model: NousResearch/Llama-3.2-1B\nsequence_len: 2048\nmicro_batch_size: 2\n"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub, "--fit", "1e-4,1e-8")
    wall = d["sections"]["wall time"]
    assert wall["seconds_per_micro_batch"] == pytest.approx(2 * (1e-4 * 2048 + 1e-8 * 2048**2))


def test_a_recipe_is_costed_as_train_runs_it(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    folder = _local_model(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text(
        "".join(json.dumps({"text": " ".join(["w1"] * n)}) + "\n" for n in [20, 900, 30, 700] * 30)
    )
    recipe = tmp_path / "r.toml"
    recipe.write_text(f'[model]\nname = "{folder}"\n[data]\npath = "{data}"\nmax_length = 1024\n')
    code, out, _ = _preflight([str(recipe), "--json", "--gpu", "H100"], capsys, monkeypatch, hub)
    d = json.loads(out)
    assert d["run"]["attn_implementation"] == "flex_attention"  # attention auto on a CUDA card
    assert d["sections"]["batches"]["padding"] < 0.05  # the bucketing sampler
    assert not any(f.startswith("padding:") for f in d["findings"])
    recipe.write_text(f'[model]\nname = "{folder}"\n[data]\nmax_length = 999999\n')
    code, _, err = _preflight([str(recipe)], capsys, monkeypatch, hub)
    assert code == 2 and "data.max_length 999999 exceeds" in err
    recipe.write_text(f'[model]\nname = "{folder}"\n[data]\npath = "{tmp_path / "gone.jsonl"}"\n')
    code, _, err = _preflight([str(recipe)], capsys, monkeypatch, hub)
    assert code == 2 and "gone.jsonl not found" in err


def test_with_real_lengths_the_ledger_prices_the_median_micro_batch(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    folder = _local_model(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text(
        "".join(json.dumps({"text": " ".join(["w1"] * n)}) + "\n" for n in [100, 200, 300, 400] * 30)
    )
    body = f"base_model: {folder}\nsequence_len: 2048\nmicro_batch_size: 2\ndatasets:\n  - path: {data}\n"
    _, d = _findings(tmp_path, body, capsys, monkeypatch, hub)
    assert d["sections"]["flops"]["width"] <= 448  # a real batch's width, not sequence_len's 2048
    assert "the median micro-batch on the real lengths" in d["sections"]["flops"]["lines"][0]


@pytest.mark.parametrize(
    ("keys", "gpu", "dtype"),
    [
        ("bf16: false\n", "H100", "fp32"),  # neither half precision: Axolotl trains in fp32
        ("bf16: false\nfp16: true\n", "H100", "fp16"),
        ("fp16: true\n", "H100", "fp16"),  # bf16's default "auto" gives way to fp16
        ("", "T4", "fp16"),  # bf16 auto on a card without bf16: fp16
        ("", "H100", "bf16"),
        ("bf16: true\n", "T4", "bf16"),  # asked for on a card without it: a finding below
    ],
)
def test_the_runs_precision_is_axolotls_and_sizes_the_flex_options(
    tmp_path: Path, capsys, monkeypatch, hub, keys: str, gpu: str, dtype: str
) -> None:
    run = tmp_path / "r.yml"
    run.write_text(f"base_model: {_local_model(tmp_path)}\nsequence_len: 1024\n{keys}")
    code, out, _ = _preflight([str(run), "--gpu", gpu, "--json"], capsys, monkeypatch, hub)
    assert code in (0, 1)
    d = json.loads(out)
    assert d["run"]["dtype"] == dtype
    assert f"{dtype})" in d["sections"]["flex"]["fwd"]["reason"]  # "(fwd, head_dim 64, fp32)"
    assert (
        d["sections"]["flex"]["smem_source"]
        == f"the {'T4' if gpu == 'T4' else 'H100 SXM'} row of the GPU table"
    )
    notes = " ".join(d["notes"])
    assert ("Axolotl trains in fp16" in notes) == (gpu == "T4" and not keys)
    refused = "bf16 on a card of capability 7.5, which has no bf16: transformers' Trainer refuses it"
    assert any(refused in f for f in d["findings"]) == (keys == "bf16: true\n")


def test_a_run_on_flex_where_no_block_size_fits_is_a_finding(
    tmp_path: Path, capsys, monkeypatch, hub
) -> None:
    """Gemma-4's head_dim 512 in fp32 on a T4 (65,536 B per block): flex cannot run; the check says so
    instead of refusing the whole config."""
    run = tmp_path / "r.yml"
    gemma = (DATA.parent.parent / "examples" / "preflight" / "gemma4-26b-a4b-sdpa.yml").read_text()
    run.write_text(
        gemma.replace("sdp_attention: true", "flex_attention: true").replace("bf16: auto", "bf16: false")
    )
    monkeypatch.chdir(DATA.parent.parent)
    code, out, err = _preflight([str(run), "--gpu", "T4"], capsys, monkeypatch, hub)
    assert code == 1, err
    text = " ".join(out.split())
    assert "fwd: flex_attention cannot run on this card: no flex block size fits 65,536 B" in text
    assert text.count("attention: flex_attention cannot run on this card") == 1  # one finding, not per pass
    assert "flex: none: flex_attention cannot compile on this card" in text


def test_the_tokens_that_train_are_checked_before_launch(tmp_path: Path, capsys, monkeypatch, hub) -> None:
    """An Axolotl run on a base model (EOS <|end_of_text|>, never in the Llama-3-like template) with a
    local chat dataset: preflight says the model never learns to stop; with the template's own end of
    turn trained (eot_tokens) and a stop token of the generation config, it does not."""
    import tiny_tokenizers as tt

    tok = tt.tokenizer("llama3", False, eos="<|end_of_text|>")
    folder = tt.save(tok, tmp_path / "base")
    data = tt.write_jsonl(tt.chats(20), tmp_path / "chats.jsonl")
    run = tmp_path / "r.yml"
    run.write_text(
        f"base_model: {folder}\nsequence_len: 512\ndatasets:\n  - path: {data}\n    type: chat_template\n"
    )
    code, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    d = json.loads(out)
    section = d["sections"]["trained tokens"]
    assert code == 1 and section["findings"][0].startswith(f"tokens that train: {data}: no example trains")
    assert section[str(data)]["trained_tokens"] > 0
    run.write_text(run.read_text() + "eot_tokens: ['<|eot_id|>']\n")
    _, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    assert len(json.loads(out)["sections"]["trained tokens"]["findings"]) == 1  # trained, but no stop
    tt.save(tok, folder, stop_ids=[tok.eos_token_id, tok.convert_tokens_to_ids("<|eot_id|>")])
    _, out, _ = _preflight([str(run), "--json"], capsys, monkeypatch, hub)
    assert json.loads(out)["sections"]["trained tokens"]["findings"] == []
