"""tuneproof inside Axolotl: one line in the run's YAML.

    plugins:
      - tuneproof.integrations.axolotl.TuneproofPlugin
    tuneproof_bucketing: true   # optional: tuneproof's BucketBatchSampler instead of Axolotl's sampler

What the plugin does, hook by hook (Axolotl 0.19's `BasePlugin`):
- `register(cfg)`, the earliest hook, called with the YAML as loaded and before Axolotl validates it:
  tuneproof's pre-flight of that config, its findings one line each in Axolotl's log. The pre-flight
  informs and never stops a run: any failure is one line, `tuneproof pre-flight skipped: <reason>`.
- `get_input_args`: the `tuneproof_*` keys (`axolotl_args.TuneproofArgs`), so that Axolotl's
  validation keeps them (its schema drops unknown keys) and refuses bucketing with packing.
- `add_callbacks_post_trainer(cfg, trainer)`: with `tuneproof_bucketing`, the Trainer's train
  dataloader made a bucketing one (`integrations.hf.use_bucketing`), Axolotl's collator kept (it pads
  each batch to a multiple of 64 unless `pad_to_multiple_of` or `pad_to_sequence_len: false`); always
  `TuneproofCallback`, so Axolotl's logs (and every `report_to` backend) gain `tuneproof/tflops_*`,
  `tuneproof/mfu_*` and `tuneproof/padding` per logging step.

This module imports without Axolotl (the plugin base is then `object` and the class is inert); Axolotl
imports it by its dotted name and then has `BasePlugin` here. Log lines go to the logger
`axolotl.integrations.tuneproof`, which Axolotl's logging config shows at INFO on the main process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

try:
    from axolotl.integrations.base import BasePlugin
    from axolotl.utils.distributed import is_main_process
    from axolotl.utils.logging import get_logger

    LOG: Any = get_logger("axolotl.integrations.tuneproof")
except ImportError:  # tuneproof without Axolotl: importable, the plugin only works under Axolotl
    BasePlugin = object
    LOG = logging.getLogger("axolotl.integrations.tuneproof")

    def is_main_process() -> bool:
        return True


__all__ = ["TuneproofPlugin"]

# keys of the loaded config that are not the run's settings: the plugin's own and the path Axolotl adds
_NOT_THE_RUN = ("axolotl_config_path",)


class TuneproofPlugin(BasePlugin):
    """Axolotl plugin: pre-flight at config load, honest MFU in the logs, optional bucketing."""

    def __init__(self) -> None:
        super().__init__()
        self.preflight_findings: list[str] | None = None  # None: not run or skipped
        self.callback: Any = None  # the TuneproofCallback given to the Trainer
        self.sampler: Any = None  # the BucketBatchSampler, with tuneproof_bucketing

    def get_input_args(self) -> str:
        return "tuneproof.integrations.axolotl_args.TuneproofArgs"

    def register(self, cfg: Any) -> None:
        """Axolotl hands the loaded YAML here before validating it: the pre-flight's moment."""
        if cfg.get("tuneproof_preflight") is False or not is_main_process():
            return
        self.preflight_findings = _preflight_findings(cfg)

    def add_callbacks_post_trainer(self, cfg: Any, trainer: Any) -> list[Any]:
        from tuneproof.train.callback import TuneproofCallback

        widths = None
        if cfg.get("tuneproof_bucketing"):
            from tuneproof.train.bucketing import use_bucketing

            self.sampler = use_bucketing(trainer)  # Axolotl's collator kept: it pads each batch itself
            multiple = getattr(trainer.data_collator, "pad_to_multiple_of", None) or 1
            widths = self.sampler.widths(multiple)
            LOG.info(
                f"tuneproof: BucketBatchSampler: {len(self.sampler)} micro-batches per epoch on this rank, "
                f"{len(widths)} distinct widths"
                + (f" (Axolotl's collator pads to a multiple of {multiple})" if multiple > 1 else "")
            )
        self.callback = TuneproofCallback(
            gpu=cfg.get("tuneproof_gpu"), peak_tflops=cfg.get("tuneproof_peak_tflops"), widths=widths
        )
        return [self.callback]


def _preflight_findings(cfg: Mapping[str, Any]) -> list[str] | None:
    """tuneproof's pre-flight of an Axolotl config, logged: one line per finding, or one line saying
    why it was skipped (then None). Never raises: a pre-flight that fails must not stop the run."""
    source = str(cfg.get("axolotl_config_path") or "the Axolotl config")
    data = {k: v for k, v in _plain(cfg).items() if k not in _NOT_THE_RUN and not k.startswith("tuneproof_")}
    try:
        from tuneproof.commands.preflight import PreflightSpec, prepare, run

        findings = [str(f) for f in run(prepare(PreflightSpec(config=data, source=source))).findings]
    except Exception as e:  # any failure, tuneproof's own included: the run goes on
        first = str(e).strip().splitlines()
        LOG.warning(f"tuneproof pre-flight skipped: {first[0] if first else type(e).__name__}")
        return None
    LOG.info(f"tuneproof pre-flight of {source}: {len(findings) or 'no'} finding(s)")
    for finding in findings:
        LOG.info(f"tuneproof pre-flight: {finding}")
    return findings


def _plain(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Axolotl's `DictDefault` (an addict Dict) as plain dicts and lists, as a YAML load gives."""
    to_dict = getattr(cfg, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else dict(cfg)
