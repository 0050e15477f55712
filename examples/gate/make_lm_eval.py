"""lm-eval output folders with planted effects, for trying `tuneproof gate` on benchmark results.

    .venv/bin/python examples/gate/make_lm_eval.py OUT_FOLDER

Writes OUT_FOLDER/{base,tuned}-{1,2}/<model>/ in lm-evaluation-harness 0.4.9's layout: a
`results_<date>.json` and one `samples_<task>_<date>.jsonl` per task (rows with doc_id, doc, target,
arguments, resps, filtered_resps, filter, metrics, doc_hash, prompt_hash, target_hash and each metric).
Three tasks, two runs (sampling seeds) per model:

- `gsm8k` (400 documents, generate_until, filters strict-match and flexible-extract, exact_match):
  sampled answers, so runs differ; the tuned model is worse (a planted drop of about 15 points).
- `arc_easy` (500 documents, multiple_choice, acc and acc_norm): loglikelihood scoring, so both runs of
  a model agree; the tuned model is better.
- `gsm8k_hard` (30 documents): the same model in both arms; sampling alone moves it by several points.

Every document's chance of being solved comes from its difficulty and the model's skill; nothing else
differs between the arms. `write_run` is the generator the tests use.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

LM_EVAL_VERSION = "0.4.9.1"  # the layout written here


@dataclass(frozen=True)
class Task:
    name: str
    docs: int
    kind: str  # "generate" (two filters, sampled) | "choice" (acc, acc_norm, deterministic)
    seed: int = 0


@dataclass(frozen=True)
class Model:
    name: str
    skill: dict[str, float] = field(default_factory=dict)  # task -> logit shift
    seed: int = 0  # the model's own per-document quirks ...
    changed: tuple[str, ...] = ()  # ... on these tasks (on the others, the base model's)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def task_rows(task: Task, model: Model, run_seed: int) -> list[dict]:
    """One run's samples rows of one task: a row per document and filter, in lm-eval's order (every
    document of the first filter, then the next filter)."""
    hard = random.Random(f"{task.name}/{task.seed}")
    quirk = random.Random(f"{model.seed if task.name in model.changed else 0}/{task.name}")
    draw = random.Random(f"{model.name}/{model.seed}/{task.name}/run{run_seed}")
    skill = model.skill.get(task.name, 0.0)
    filters = ("strict-match", "flexible-extract") if task.kind == "generate" else ("none",)
    per_filter: dict[str, list[dict]] = {f: [] for f in filters}
    for doc_id in range(task.docs):
        difficulty, own = hard.gauss(0.0, 1.5), quirk.gauss(0.0, 0.5)
        doc = {"question": f"{task.name} question {doc_id}", "answer": f"#### {doc_id % 97}"}
        prompt = f"Question: {doc['question']}\nAnswer:"
        base = {"doc_id": doc_id, "doc": doc, "target": doc["answer"]}
        hashes = {"doc_hash": _hash(json.dumps(doc, indent=2, ensure_ascii=False)),
                  "prompt_hash": _hash(prompt), "target_hash": _hash(doc["answer"])}  # fmt: skip
        if task.kind == "generate":
            solved = draw.random() < _sigmoid(skill - difficulty + own)
            formatted = solved and draw.random() < 0.85  # strict-match also needs the "#### n" line
            text = f"The answer is {doc_id % 97 if solved else -1}." + (
                f"\n#### {doc_id % 97}" if formatted else ""
            )
            args = {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["Question:"], "do_sample": True}}}
            for filt, hit in (("strict-match", formatted), ("flexible-extract", solved)):
                answer = str(doc_id % 97) if hit else ("[invalid]" if filt == "strict-match" else "-1")
                per_filter[filt].append(
                    {
                        **base,
                        "arguments": args,
                        "resps": [[text]],
                        "filtered_resps": [answer],
                        "filter": filt,
                        "metrics": ["exact_match"],
                        **hashes,
                        "exact_match": float(hit),
                    }
                )
        else:
            margin = skill - difficulty + own
            acc, acc_norm = margin > 0, margin + quirk.gauss(0.0, 0.3) > 0
            choices = [[-1.0 - (0.5 if acc and i == 0 else 0.0), False] for i in range(4)]
            args = {f"gen_args_{i}": {"arg_0": prompt, "arg_1": f" choice {i}"} for i in range(4)}
            per_filter["none"].append(
                {
                    **base,
                    "target": 0,
                    "arguments": args,
                    "resps": [[c] for c in choices],
                    "filtered_resps": choices,
                    "filter": "none",
                    "metrics": ["acc", "acc_norm"],
                    **hashes,
                    "acc": float(acc),
                    "acc_norm": float(acc_norm),
                }
            )
    return [row for f in filters for row in per_filter[f]]


def _results(
    tasks: list[Task], rows: dict[str, list[dict]], model: Model, date: str, groups: dict[str, list[str]]
) -> dict:
    results, configs, higher = {}, {}, {}
    for task in tasks:
        entry: dict[str, object] = {"alias": task.name}
        metrics = ["exact_match"] if task.kind == "generate" else ["acc", "acc_norm"]
        for filt in dict.fromkeys(r["filter"] for r in rows[task.name]):
            for m in metrics:
                values = [r[m] for r in rows[task.name] if r["filter"] == filt]
                mean = sum(values) / len(values)
                sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
                entry[f"{m},{filt}"] = mean
                entry[f"{m}_stderr,{filt}"] = sd / math.sqrt(len(values))
        results[task.name] = entry
        configs[task.name] = {"task": task.name, "output_type": "generate_until" if task.kind == "generate"
                              else "multiple_choice",
                              "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True}
                                              for m in metrics]}  # fmt: skip
        higher[task.name] = dict.fromkeys(metrics, True)
    pooled = {}
    for group, members in groups.items():  # lm-eval's weight_by_size: the mean over every document
        values = [r["acc"] for t in members for r in rows[t]]
        pooled[group] = {"alias": group, "acc,none": sum(values) / len(values), "acc_stderr,none": "N/A"}
    subtasks = {**groups, **{t.name: [] for t in tasks if not any(t.name in m for m in groups.values())}}
    return {
        "results": {**pooled, **results},
        **({"groups": pooled} if groups else {}),
        "group_subtasks": subtasks,
        "configs": configs,
        "versions": {t.name: 3.0 for t in tasks},
        "n-shot": {t.name: 0 for t in tasks},
        "higher_is_better": higher,
        "n-samples": {t.name: {"original": t.docs, "effective": t.docs} for t in tasks},
        "model_name": model.name,
        "lm_eval_version": LM_EVAL_VERSION,
        "date": date,
    }


def write_run(
    folder: Path,
    tasks: list[Task],
    model: Model,
    run_seed: int,
    date: str,
    groups: dict[str, list[str]] | None = None,
) -> Path:
    """One lm-eval run in `folder/<model>/`: its results file and a samples file per task; `groups` (of
    choice tasks) are aggregated over their documents, as lm-eval's weight_by_size does."""
    out = folder / model.name.replace("/", "__")
    out.mkdir(parents=True, exist_ok=True)
    rows = {t.name: task_rows(t, model, run_seed) for t in tasks}
    for name, task_rows_ in rows.items():
        (out / f"samples_{name}_{date}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in task_rows_), encoding="utf-8"
        )
    (out / f"results_{date}.json").write_text(
        json.dumps(_results(tasks, rows, model, date, groups or {}), indent=2)
    )
    return folder


TASKS = [
    Task("gsm8k", 400, "generate"),
    Task("arc_easy", 500, "choice"),
    Task("gsm8k_hard", 30, "generate", 1),
]
BASE = Model("org/base-7b", {"gsm8k": 0.4, "arc_easy": 0.5, "gsm8k_hard": -0.3})
TUNED = Model(
    "org/base-7b-tuned", {"gsm8k": -0.4, "arc_easy": 0.8, "gsm8k_hard": -0.3}, 1, ("gsm8k", "arc_easy")
)


def main(out: Path) -> None:
    for i, seed in enumerate((11, 12), start=1):
        write_run(out / f"base-{i}", TASKS, BASE, seed, f"2026-11-0{i}T10-00-00.000000")
        write_run(out / f"tuned-{i}", TASKS, TUNED, seed + 16, f"2026-11-0{i}T12-00-00.000000")
    print(f"wrote base-1, base-2, tuned-1, tuned-2 under {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
