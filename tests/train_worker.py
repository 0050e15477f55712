"""Worker for the 2-process `tuneproof train` test: run under torchrun, record this rank's rows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from transformers import TrainerCallback

from tuneproof.commands.train import TrainSpec, prepare, run
from tuneproof.core.terminal import PrintedProgress
from tuneproof.runs.recipe import from_dict


class Rows(TrainerCallback):
    """Every row this rank trains on (its real tokens, padding stripped)."""

    def __init__(self) -> None:
        self.rows: list[list[int]] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):  # type: ignore[no-untyped-def]
        def record(module, a, kw):  # type: ignore[no-untyped-def]
            if module.training:
                for ids, mask in zip(kw["input_ids"].tolist(), kw["attention_mask"].tolist(), strict=True):
                    self.rows.append([t for t, m in zip(ids, mask, strict=True) if m])

        base = model.module if hasattr(model, "module") else model
        base.get_base_model().register_forward_pre_hook(record, with_kwargs=True)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    recipe = from_dict(
        {"optim": {"max_steps": 3, "micro_batch": 2, "grad_accum": 1}, "run": {"probe_budget_s": 0}},
        "worker recipe",
    )
    seen = Rows()
    result = run(prepare(TrainSpec(recipe=recipe, output_dir=out / "run")), PrintedProgress(), [seen])
    rank = os.environ["RANK"]
    import torch.distributed as dist

    left = not dist.is_initialized()  # the run tore down the group it started, after every rank arrived
    (out / f"rows-{rank}.json").write_text(json.dumps({"rows": seen.rows, "main": result.main, "left": left}))
