"""What the Axolotl plugin needs from tuneproof in this venv, without Axolotl: the plugin module
imports (Axolotl imports it by its dotted name; tuneproof alone must not fail on it), and the callback
still sees every micro-batch under peft 0.20 (Axolotl 0.19's pin), whose LoRA tuner runs the base
model's `forward` directly, so no module hook on the base fires. The plugin itself is tested through
Axolotl in tests/integrations/test_axolotl_plugin.py (`make test-axolotl`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from test_callback import _trainer

from tuneproof.train.callback import TuneproofCallback


@pytest.mark.skipif(importlib.util.find_spec("axolotl") is not None, reason="Axolotl is installed here")
def test_the_plugin_module_imports_without_axolotl() -> None:
    import tuneproof.integrations.axolotl as module

    assert module.TuneproofPlugin.__mro__[1] is object  # no BasePlugin to subclass here
    assert module.TuneproofPlugin().get_input_args() == "tuneproof.integrations.axolotl_args.TuneproofArgs"


@pytest.mark.slow
def test_the_callback_sees_each_micro_batch_when_peft_calls_the_base_forward_directly(
    tmp_path: Path, monkeypatch
) -> None:
    from peft import LoraConfig, PeftModelForCausalLM, get_peft_model
    from peft.tuners.tuners_utils import BaseTuner

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    def forward_of_peft_0_20(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self.model.forward(*args, **kwargs)  # peft 0.20's BaseTuner.forward, verbatim

    monkeypatch.setattr(BaseTuner, "forward", forward_of_peft_0_20)
    model = build_model(resolve(config_dict("llama", pad_token_id=0)), "eager")
    # task_type as Axolotl sets it: PeftModelForCausalLM calls the tuner, which calls the base's forward
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    assert isinstance(model, PeftModelForCausalLM)
    ours = TuneproofCallback()
    trainer = _trainer(tmp_path, 2, True, [ours], model=model)
    trainer.train()
    assert [s.micro_batches for s in ours.history] == [2, 2, 2]
    assert all(s.performed >= s.intended > 0 for s in ours.history)
