"""A base checkpoint already stored quantised (its config.json's `quantization_config`, read by
`tuneproof.arch.quantization`), and what loading it for QLoRA or 8-bit LoRA does.

Axolotl 0.19 (`loaders/model.py` `ModelLoader._set_quantization_config`): with an adapter, a base whose
quant_method is gptq, awq or bitsandbytes is loaded with its own config (GPTQConfig, AwqConfig or
BitsAndBytesConfig built from config.json's), whatever load_in_4bit says; any other base gets the
BitsAndBytesConfig of `adapter: qlora` + `load_in_4bit` or `adapter: lora` + `load_in_8bit`.
transformers 5.24 (`quantizers/auto.py` `get_hf_quantizer`) then meets the checkpoint's config and the
one passed: a quant_method it knows (`supports_quant_method`) goes to `merge_quantization_configs`, which
raises ValueError when the two config classes differ; one it does not know is skipped with a warning and
the stored tensors are loaded as if unquantised.
"""

from __future__ import annotations

from tuneproof.arch.quantization import StoredQuantisation
from tuneproof.preflight.sections import Section
from tuneproof.runs.run import Run

# Bases Axolotl loads with their own quantization_config when an adapter trains (its config class)
AXOLOTL_OWN = {"gptq": "GPTQConfig", "awq": "AwqConfig", "bitsandbytes": "BitsAndBytesConfig"}
# Axolotl's model_quantization_config that dequantises such a base at load (its gpt-oss examples)
DEQUANTISE = {"fp8": "FineGrainedFP8Config", "mxfp4": "Mxfp4Config"}


def base_quantisation(run: Run, stored: StoredQuantisation) -> Section:
    """The base's declared storage (`tuneproof.arch.quantization.stored_quantisation`) and, when the run
    asks bitsandbytes for 4 or 8 bits, what Axolotl and transformers do with a checkpoint already
    quantised."""
    s = Section(name="quantised base", data={"quant_method": stored.method, "fields": stored.fields})
    s.lines.append(f"the base is stored quantised ({stored.where}): {stored.describe()}")
    if run.adapter == "qlora" and run.load_in_4bit:
        asked = "adapter: qlora with load_in_4bit"
    elif run.adapter == "lora" and run.load_in_8bit:
        asked = "adapter: lora with load_in_8bit"
    else:
        return s
    problem = _load(stored, asked)
    s.data["load"] = problem
    if stored.method == "bitsandbytes":  # a bitsandbytes base loads as bitsandbytes: the usual path
        s.lines.append(problem)
        return s
    s.findings.append(f"{run.source}: base stored quantised, {stored.describe()}: {problem}")
    return s


def _load(stored: StoredQuantisation, asked: str) -> str:
    """What loading `stored` under `asked` does, in transformers 5.24's and Axolotl 0.19's words."""
    method = stored.method
    if method is None:
        return (
            "its quantization_config names no quant_method: Axolotl 0.19 reads "
            "quantization_config['quant_method'] before loading and stops there (KeyError)"
        )
    if method in AXOLOTL_OWN:
        return (
            f"{asked} does not quantise it: Axolotl 0.19 loads it with its own config "
            f"({AXOLOTL_OWN[method]} of config.json's), so the bitsandbytes settings of {asked} do not "
            f"apply and the adapter trains on the stored {method} weights"
        )
    known = _config_class(method)
    if known is None:
        return (
            f"{asked} makes Axolotl 0.19 pass a BitsAndBytesConfig; transformers 5.24 does not know "
            f"quant_method {method!r}, so it warns, skips the checkpoint's quantization_config and loads "
            "the stored tensors as if unquantised, and bitsandbytes then quantises whatever they hold; "
            "train on the unquantised original"
        )
    fix = (
        f"to train on it, dequantise at load (model_quantization_config: {DEQUANTISE[method]} with "
        "model_quantization_config_kwargs {dequantize: true}, and adapter: lora without load_in_4bit; "
        "Axolotl's gpt-oss examples do this with Mxfp4Config)"
        if method in DEQUANTISE
        else "train on the unquantised original"
    )
    return (
        f"{asked} makes Axolotl 0.19 pass a BitsAndBytesConfig, and bitsandbytes cannot quantise it "
        f"again: transformers 5.24 refuses the load ('The model is quantized with {known} but you are "
        f"passing a BitsAndBytesConfig config', AutoHfQuantizer.merge_quantization_configs); {fix}"
    )


def _config_class(method: str) -> str | None:
    """The config class transformers maps `method` to (its AUTO_QUANTIZATION_CONFIG_MAPPING), or None
    when it does not know the method."""
    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING

    cls = AUTO_QUANTIZATION_CONFIG_MAPPING.get(method)
    return None if cls is None else cls.__name__
