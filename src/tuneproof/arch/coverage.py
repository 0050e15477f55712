"""Which of transformers' causal-LM model types tuneproof costs, and why the others are refused.

Every model_type the installed transformers maps to a causal LM is read by construction
(`tuneproof.arch.construct`) unless it is listed here. `tests/flops/test_counter_parity.py` enumerates the
installed mapping and checks both directions: every unlisted type's performed ledger equals
FlopCounterMode on a tiny build (forward, full, LoRA, LoRA with checkpointing), and every listed type
is refused with its reason. docs/families.md is this table in prose.

Two kinds of entry:
- OUT_OF_SCOPE: not a text decoder (encoder-decoder halves, encoders run as decoders, audio or
  image generators). Refused: a decoder-only FLOP ledger would describe another model.
- NOT_COSTED: text decoders whose mixer or block tuneproof does not model yet, with what it is.
  Refused, never costed as the nearest known kind.
"""

from __future__ import annotations

_ENC_DEC = "the decoder half of an encoder-decoder model"
_ENCODER = "a bidirectional encoder (BERT family) run as a decoder with is_decoder"
_AUDIO = "an audio model"
_VISION = "an image-to-text model whose decoder is not a plain text config"
_MULTIMODAL = "a vision- or audio-language model whose decoder reads encoder features inside its layers"

OUT_OF_SCOPE: dict[str, str] = {
    **{
        t: _ENC_DEC
        for t in (
            "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp",
            "pegasus", "plbart", "prophetnet", "trocr", "whisper",
        )
    },
    **{
        t: _ENCODER
        for t in (
            "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
            "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer",
            "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod", "xlnet",
        )
    },
    **{t: _AUDIO for t in ("musicgen", "musicgen_melody", "moshi", "moss_transcribe_diarize")},
    **{t: _VISION for t in ("git",)},
    # mllama's cross-attention layers attend to vision-encoder states (and are skipped without an
    # image); phi4_multimodal's causal LM holds its audio and vision encoders.
    **{t: _MULTIMODAL for t in ("mllama", "phi4_multimodal")},
}  # fmt: skip

NOT_COSTED: dict[str, str] = {
    "zamba": (
        "hybrid layers that run one shared attention block (weights tied across them) on the hidden "
        "state concatenated with the embeddings, then a linear into the Mamba layer's input; its Mamba-1 "
        "mixer keeps x_proj / dt_proj as raw per-head 3-D parameters (ZambaMambaMixer)"
    ),
    "deepseek_v4": (
        "compressed attention: HCA and CSA layers append to the single shared key/value head the entries "
        "their compressor forms (kv_proj and gate_proj on the layer input, a softmax-gated sum over every "
        "compress_rate tokens; CSA's windows overlap), so attention runs over T + T // rate keys with a "
        "block bias; CSA adds a lightning indexer (DeepseekV4Indexer) scoring each query against the "
        "compressed keys; the output projection o_a_proj is a torch.bmm per head group; the residual is "
        "hc_mult streams mixed by DeepseekV4HyperConnection (F.linear of the flattened streams, then "
        "Sinkhorn iterations); none of these has a ledger step"
    ),
    "gemma3n": (
        "AltUp: modality_router runs twice per layer (predict and correct) and predict's torch.matmul of "
        "the stacked streams with per-token coefficients (2*T*H*N^2, activation by activation) has no "
        "ledger step (0.973 of FlopCounterMode forward)"
    ),
    "gemma3n_text": (
        "AltUp: modality_router runs twice per layer (predict and correct) and predict's torch.matmul of "
        "the stacked streams with per-token coefficients (2*T*H*N^2, activation by activation) has no "
        "ledger step (0.973 of FlopCounterMode forward)"
    ),
    "reformer": "LSH and local attention",
    "blt": "a byte-level patcher with local encoder and decoder around the global model",
    **{
        t: (
            "a drafting model for assisted decoding: its forward reads the target model's hidden states "
            "(2 x backbone_hidden_size through pre_projection) and shared KV states, not token ids; every "
            "layer is KV-shared, attending the target's keys under a bidirectional mask"
        )
        for t in ("gemma4_assistant", "gemma4_unified_assistant")
    },
}  # fmt: skip


def refusal(model_type: str) -> str | None:
    """Why `model_type` is refused, or None when tuneproof costs it."""
    if model_type in OUT_OF_SCOPE:
        return f"{model_type} is {OUT_OF_SCOPE[model_type]}: out of scope for a decoder FLOP ledger"
    if model_type in NOT_COSTED:
        return f"{model_type}: {NOT_COSTED[model_type]}, which tuneproof does not cost yet"
    return None
