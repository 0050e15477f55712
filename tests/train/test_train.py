"""`tuneproof train`: the embedded default end to end, bad recipes refused before anything is written,
and --resume continuing with the same batches an uninterrupted run sees."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tuneproof.cli.app import main

pytestmark = pytest.mark.slow  # real Trainer runs: left out of mutation runs


def test_the_embedded_default_trains_and_leaves_a_mergeable_adapter(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    # stdout is the summary alone: the Trainer's log dicts ({'loss': ...}) stayed off it
    labels = ("trained", "adapter", "health", "report", "base", "recipe")
    assert [line.split()[0] for line in printed.splitlines()] == list(labels), printed[:2000]
    assert (
        "trained   40 optimizer steps" in printed and "lora_B non-zero in 59 of 59 adapted modules" in printed
    )
    for name in ("recipe.toml", "base/model.safetensors", "adapter/adapter_model.safetensors",
                 "adapter/base_fingerprint.json"):  # fmt: skip
        assert (out / name).is_file(), name
    assert 'attention = "auto"' in (out / "recipe.toml").read_text()  # every default written out
    assert (out / "report" / "training.png").is_file() and (out / "report" / "report.json").is_file()
    readme = (Path(__file__).parent.parent.parent / "docs" / "train.md").read_text()
    shown = readme[
        readme.index("trained   40 optimizer steps") : readme.index("(every default filled in)\n```") + 24
    ]
    # the README's example is this run; the loss and norm digits vary with the CPU's kernels, not the code
    decimals = re.compile(r"\d+\.\d+")
    assert decimals.sub("<x>", shown.replace("/tmp/tiny-run", str(out))) in decimals.sub("<x>", printed)
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((out / "base").resolve())  # the adapter names its base
    # the adapter is what the shipping commands expect: checked, and merged onto the recorded base. The
    # tiny model's router has 8 experts, so PEFT's all-linear puts a rank-16 LoRA on an 8-wide matrix:
    # lora check names it (a tiny-model artefact: a real Gemma 4 router is 128 wide)
    capsys.readouterr()
    assert main(["lora", "check", str(out / "adapter"), "--base", str(out / "base")]) == 1
    assert "router.proj: rank 16 on a 8-wide side" in " ".join(capsys.readouterr().out.split())
    assert (
        main(
            [
                "merge",
                "--base",
                str(out / "base"),
                "--adapter",
                str(out / "adapter"),
                "--out",
                str(tmp_path / "m"),
            ]
        )
        == 0
    )
    # the same folder again is refused: nothing is overwritten
    capsys.readouterr()
    assert main(["train", "--output", str(out)]) == 2
    assert "holds this run finished" in capsys.readouterr().err


def _recipe(tmp_path: Path, text: str) -> str:
    path = tmp_path / "r.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "[optim]\nmicro_batchs = 2\n",
            "unknown key 'optim.micro_batchs' (did you mean 'optim.micro_batch'?)",
        ),
        ("[optimizer]\nlr = 1\n", "unknown section 'optimizer' (did you mean 'optim'?)"),
        ('[optim]\nlr = "abc"\n', "optim.lr is 'abc'"),
        ("[optim]\nmicro_batch = 0\n", "optim.micro_batch is 0"),
        ('[optim]\nschedule = "cosin"\n', "did you mean 'cosine'?"),
        ('[run]\nattention = "flash"\n', "unknown run.attention 'flash'"),
        ("[lora]\nr = 2.5\n", "lora.r is 2.5"),
        ('[data]\npath = "missing.jsonl"\n', "/missing.jsonl not found"),
        ('[lora]\ntargets = ["nope_proj"]\n', "match nothing in the model"),
        ('[model]\nname = "some/hub-id"\n', "is not a local model folder"),
        ("[optim\n", "is not TOML"),
    ],
)
def test_a_bad_recipe_is_refused_and_nothing_is_written(
    text: str, needle: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["train", _recipe(tmp_path, text), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_a_dataset_without_a_usable_text_field_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "d.jsonl").write_text(json.dumps({"body": "hello there"}) + "\n")
    recipe = _recipe(tmp_path, f'[data]\npath = "{tmp_path / "d.jsonl"}"\n')
    assert main(["train", recipe, "--output", str(tmp_path / "out")]) == 2
    assert "no text field 'text' and no chat 'messages' (its keys: body)" in capsys.readouterr().err


def test_an_output_folder_of_another_run_or_other_files_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "recipe.toml").write_text('# x\n[model]\nname = "elsewhere"\n')
    assert main(["train", "--output", str(tmp_path / "other")]) == 2
    assert "holds a different run" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert main(["train", "--output", str(tmp_path / "full")]) == 2
    assert "is not empty and holds no tuneproof run" in capsys.readouterr().err
    assert main(["train", "--output", str(tmp_path / "none"), "--resume"]) == 2
    assert "holds no run to resume" in capsys.readouterr().err
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


def test_resume_continues_with_the_batches_an_uninterrupted_run_sees(tmp_path: Path) -> None:
    """Stop after step 3 (a checkpoint is saved there), resume: the micro-batches of steps 4-6 are the
    ones the uninterrupted run trained on, in the same order (the sampler resumes at its position)."""
    from transformers import TrainerCallback

    from tuneproof.commands.train import TrainSpec, prepare, run
    from tuneproof.core.terminal import PrintedProgress
    from tuneproof.runs.recipe import from_dict

    class Seen(TrainerCallback):
        def __init__(self, stop_at: int | None = None) -> None:
            self.batches: list[tuple[int, ...]] = []
            self.stop_at = stop_at

        def on_train_begin(self, args, state, control, model=None, **kwargs):  # type: ignore[no-untyped-def]
            def record(module, a, kw):  # type: ignore[no-untyped-def]
                if module.training:
                    self.batches.append(tuple(kw["input_ids"][:, :8].flatten().tolist()))

            model.get_base_model().register_forward_pre_hook(record, with_kwargs=True)

        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            if self.stop_at is not None and state.global_step == self.stop_at:
                control.should_training_stop = True

    recipe = from_dict(
        {
            "optim": {"max_steps": 6, "micro_batch": 2, "grad_accum": 2},
            "run": {"save_steps": 3, "probe_budget_s": 0},
        },
        "test recipe",
    )
    whole = Seen()
    run(prepare(TrainSpec(recipe=recipe, output_dir=tmp_path / "whole")), PrintedProgress(), [whole])
    first, second = Seen(stop_at=3), Seen()
    run(prepare(TrainSpec(recipe=recipe, output_dir=tmp_path / "cut")), PrintedProgress(), [first])
    assert len(first.batches) == 6  # 3 steps x 2 micro-batches, then stopped
    again = TrainSpec(recipe=recipe, output_dir=tmp_path / "cut", resume=True)
    result = run(prepare(again), PrintedProgress(), [second])
    assert result.steps == 6
    assert first.batches + second.batches == whole.batches


def test_two_processes_under_torchrun_train_disjoint_batches_and_save_once(tmp_path: Path) -> None:
    """`torchrun --nproc-per-node 2` (gloo on the CPU): DDP through the Trainer, each rank its own rows,
    one adapter and one summary, written by rank 0."""
    import subprocess
    import sys

    worker = Path(__file__).parent.parent / "train_worker.py"
    torchrun = Path(sys.executable).parent / "torchrun"
    done = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", str(worker), str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rows-{r}.json").read_text()) for r in (0, 1)]
    assert [r["main"] for r in ranks] == [True, False]
    assert all(r["left"] for r in ranks)  # each rank left the process group, none exits inside it
    rows = [{tuple(x) for x in r["rows"]} for r in ranks]
    assert len(ranks[0]["rows"]) == len(ranks[1]["rows"]) == 6  # 3 steps x micro-batch 2 on each rank
    assert not rows[0] & rows[1]  # disjoint
    assert (tmp_path / "run" / "adapter" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "run" / "adapter" / "base_fingerprint.json").is_file()


def test_chat_rows_train_through_the_chat_template(tmp_path: Path, capsys) -> None:
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Name a river {i}."},
                {"role": "assistant", "content": "The Tay."},
            ]
        }
        for i in range(12)
    ]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = _recipe(
        tmp_path, f'[data]\npath = "{tmp_path / "chat.jsonl"}"\n[optim]\nmax_steps = 2\ngrad_accum = 1\n'
    )
    assert main(["train", recipe, "--output", str(tmp_path / "out"), "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # --json: stdout is one strict JSON object, nothing else
    assert result["steps"] == 2 and result["adapter"].endswith("adapter")
    assert result["report"].endswith("report.md") and result["adapter_health"].endswith("adapter_health.json")
    assert "it/s" not in captured.err and "Writing" not in captured.err  # no progress bars either


def _chats(n: int) -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": f"River {i}?"}, {"role": "assistant", "content": "Tay."}]}
        for i in range(n)
    ]


@pytest.mark.parametrize("assistant_only", [True, False])
def test_chat_rows_go_through_sft_trainer_with_the_loss_on_the_assistant_only(
    tmp_path: Path, assistant_only: bool
) -> None:
    from trl import SFTTrainer

    from tuneproof.runs.recipe import from_dict
    from tuneproof.train.base import attach_lora as apply_lora
    from tuneproof.train.base import load_base as load_model
    from tuneproof.train.bucketing import use_bucketing
    from tuneproof.train.trainer import build_trainer

    recipe = from_dict({"data": {"assistant_only_loss": assistant_only}}, "test")
    model, tokenizer, _ = load_model(recipe, "sdpa")
    trainer = build_trainer(apply_lora(model, recipe), tokenizer, recipe, _chats(4), tmp_path, False, True)
    assert isinstance(trainer, SFTTrainer)
    use_bucketing(trainer)
    batch = next(iter(trainer.get_train_dataloader()))
    for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True):
        trained = tokenizer.decode(ids[labels != -100])
        real = tokenizer.decode(ids[mask == 1])
        assert trained == ("Tay.\n" if assistant_only else real), trained


def test_a_chat_template_without_generation_markers_is_refused_for_assistant_only_loss() -> None:
    from tuneproof.core.errors import TuneproofError
    from tuneproof.gate.generate import tiny_tokenizer
    from tuneproof.runs.recipe import from_dict
    from tuneproof.train.data import check_chat_template

    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(TuneproofError, match=r"set data\.assistant_only_loss = false"):
        check_chat_template(tokenizer, from_dict({}, "test"))
    check_chat_template(tokenizer, from_dict({"data": {"assistant_only_loss": False}}, "test"))
    tokenizer.chat_template = None
    with pytest.raises(TuneproofError, match="has no chat template"):
        check_chat_template(tokenizer, from_dict({"data": {"assistant_only_loss": False}}, "test"))


def test_a_dataset_mixing_chat_and_text_rows_is_refused(tmp_path: Path, capsys) -> None:
    rows = [*_chats(2), {"text": "plain"}]
    (tmp_path / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = _recipe(tmp_path, f'[data]\npath = "{tmp_path / "mixed.jsonl"}"\n')
    assert main(["train", recipe, "--output", str(tmp_path / "out")]) == 2
    assert "row 3 has no chat 'messages' list, but row 1 has one" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[lora]\ntarget_parameters = ["mlp.nothing"]\n', "match no parameter in the model"),
        ("[run]\nlogging_steps = 1\n", "cannot be written"),  # --output under /proc
    ],
)
def test_more_bad_runs_are_refused_before_training(text: str, needle: str, tmp_path: Path, capsys) -> None:
    out = "/proc/tuneproof-run" if needle == "cannot be written" else str(tmp_path / "out")
    assert main(["train", _recipe(tmp_path, text), "--output", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_a_text_field_that_is_not_text_is_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "d.jsonl").write_text(json.dumps({"text": None}) + "\n")
    recipe = _recipe(tmp_path, f'[data]\npath = "{tmp_path / "d.jsonl"}"\n')
    assert main(["train", recipe, "--output", str(tmp_path / "out")]) == 2
    assert "row 1's 'text' is NoneType, not text" in capsys.readouterr().err


def test_a_run_too_short_to_train_the_adapter_says_so(tmp_path: Path) -> None:
    recipe = _recipe(
        tmp_path, "[optim]\nmax_steps = 1\ngrad_accum = 1\nwarmup_ratio = 0.5\n[run]\nprobe_budget_s = 0\n"
    )
    with pytest.warns(UserWarning, match="the adapter did not train everywhere"):
        assert main(["train", recipe, "--output", str(tmp_path / "out")]) == 0


def test_a_finished_run_is_not_trained_past_its_end(tmp_path: Path, capsys) -> None:
    recipe = _recipe(tmp_path, "[optim]\nmax_steps = 2\ngrad_accum = 1\n[run]\nprobe_budget_s = 0\n")
    out = tmp_path / "run"
    assert main(["train", recipe, "--output", str(out), "--json"]) == 0
    capsys.readouterr()
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    assert main(["train", recipe, "--output", str(out), "--resume"]) == 2
    assert "holds this run finished" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_resume_passes_over_a_checkpoint_cut_short_and_a_copied_run_resumes(tmp_path: Path, capsys) -> None:
    import shutil

    from tuneproof.train.folder import last_checkpoint

    recipe = _recipe(
        tmp_path, "[optim]\nmax_steps = 4\ngrad_accum = 1\n[run]\nsave_steps = 2\nprobe_budget_s = 0\n"
    )
    out = tmp_path / "run"
    assert main(["train", recipe, "--output", str(out), "--json"]) == 0
    (out / "run_state.json").unlink()  # as if stopped before the end
    shutil.rmtree(out / "adapter")
    (out / "checkpoints" / "checkpoint-4" / "trainer_state.json").unlink()  # Ctrl-C during that save
    assert last_checkpoint(out) == out / "checkpoints" / "checkpoint-2"
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)  # another folder, the same run: its output_dir alone differs
    capsys.readouterr()
    assert main(["train", recipe, "--output", str(copy), "--resume", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 4
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.rmtree(out / "checkpoints" / name, ignore_errors=name == "checkpoint-4")
    (out / "checkpoints" / "checkpoint-4").mkdir()  # stopped before any checkpoint was complete
    with pytest.warns(UserWarning, match="holds no complete checkpoint yet: training from step 0"):
        assert main(["train", recipe, "--output", str(out), "--resume", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 4


def test_a_recipe_changed_under_a_run_names_the_key(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    out.mkdir()
    from tuneproof.runs.recipe import from_dict

    (out / "recipe.toml").write_text(from_dict({"optim": {"lr": 1e-4}}, "x").to_toml())
    assert main(["train", _recipe(tmp_path, "[optim]\nlr = 2e-4\n"), "--output", str(out), "--resume"]) == 2
    assert "differs from this recipe: optim.lr was 0.0001, now 0.0002" in capsys.readouterr().err


BAD_CHATS = [
    ([{"messages": [{"rol": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}],
     "row 1, turn 1 is not a {role, content} pair of strings (it has: ['content', 'rol'])"),
    ([{"messages": []}], "row 1's 'messages' is empty"),
    ([{"messages": [{"role": "user", "content": "hi"}]}], "row 1 has no assistant turn"),
    ([{"text": "plain"}, {"messages": [{"role": "user", "content": "hi"}]}], "row 2 is a chat ('messages')"),
    ([{"text": "plain"}, {"text": 7}], "row 2's 'text' is int, not text"),
    ([{"text": "plain"}, {"foo": "x"}], "row 2 has no text field 'text'"),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "needle"), BAD_CHATS)
def test_bad_rows_anywhere_are_refused_before_anything_is_written(
    rows: list[dict], needle: str, tmp_path: Path, capsys
) -> None:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = _recipe(tmp_path, '[data]\npath = "d.jsonl"\n')  # relative to the recipe's folder
    assert main(["train", recipe, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_a_failure_after_the_first_write_leaves_nothing_behind(tmp_path: Path, monkeypatch, capsys) -> None:
    import tuneproof.commands.train as run
    from tuneproof.core.errors import TuneproofError

    def refuse(*args: object, **kwargs: object) -> None:
        raise TuneproofError("TRL's SFTTrainer cannot prepare the chat rows: boom", "check them")

    monkeypatch.setattr(run, "build_trainer", refuse)
    assert main(["train", "--output", str(tmp_path / "out")]) == 2
    assert "cannot prepare the chat rows: boom" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # recipe.toml and base/ removed again
    (tmp_path / "empty").mkdir()
    assert main(["train", "--output", str(tmp_path / "empty")]) == 2
    assert list((tmp_path / "empty").iterdir()) == []  # the folder stays, as empty as it was


def test_model_folders_need_a_tokenizer_and_a_run_base_has_one(tmp_path: Path, capsys) -> None:
    recipe = _recipe(tmp_path, "[optim]\nmax_steps = 1\ngrad_accum = 1\n[run]\nprobe_budget_s = 0\n")
    assert main(["train", recipe, "--output", str(tmp_path / "run"), "--json"]) == 0
    base = tmp_path / "run" / "base"
    assert (base / "tokenizer.json").is_file()
    again = _recipe(
        tmp_path, f'[model]\nname = "{base}"\n[optim]\nmax_steps = 1\n[run]\nprobe_budget_s = 0\n'
    )
    capsys.readouterr()
    assert main(["train", again, "--output", str(tmp_path / "again"), "--json"]) == 0  # trains from it
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (base / name).unlink()
    assert main(["train", again, "--output", str(tmp_path / "third")]) == 2
    assert "has no tokenizer that loads" in capsys.readouterr().err
    assert not (tmp_path / "third").exists()


def test_lora_targets_as_one_string_are_refused_with_the_list_to_write(tmp_path: Path, capsys) -> None:
    assert (
        main(["train", _recipe(tmp_path, '[lora]\ntargets = "q_proj"\n'), "--output", str(tmp_path / "o")])
        == 2
    )
    assert 'write a list: targets = ["q_proj"]' in capsys.readouterr().err


def test_the_budget_stops_training_with_a_checkpoint_that_resumes(tmp_path: Path, monkeypatch) -> None:
    """Issue 35: `train`, "under a minute on a CPU", ran past 600 s under a neighbour's load with no
    way to bound it. A fake clock that each optimizer step advances by 10 s: a 45 s budget stops after
    step 4 (a fifth would end at 50 s), says so, saves a checkpoint, and --resume finishes the run."""
    from functools import partial

    from transformers import TrainerCallback

    from tuneproof.commands import train as train_command
    from tuneproof.commands.train import TrainSpec, prepare, run
    from tuneproof.core.deadline import Deadline
    from tuneproof.runs.recipe import from_dict

    now = [0.0]

    class TenSecondSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            now[0] += 10.0

    monkeypatch.setattr(train_command, "Deadline", partial(Deadline, clock=lambda: now[0]))
    recipe = from_dict({"optim": {"max_steps": 8, "micro_batch": 2, "grad_accum": 1},
                        "run": {"save_steps": 100, "probe_budget_s": 0}}, "test recipe")  # fmt: skip
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="the 45 s budget stopped training at step 4 of 8"):
        spec = TrainSpec(recipe=recipe, output_dir=out, budget_s=45.0)
        result = run(prepare(spec), None, [TenSecondSteps()])
    assert result.steps == 4 and result.stopped is not None and "checkpoint is saved" in result.stopped
    assert result.to_dict()["stopped_by_budget"] == result.stopped
    assert any(line.startswith("stopped   the 45 s budget") for line in result.lines())
    assert (out / "checkpoints" / "checkpoint-4").is_dir()
    again = run(prepare(TrainSpec(recipe=recipe, output_dir=out, resume=True)), None)
    assert again.steps == 8 and again.stopped is None
