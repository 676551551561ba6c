"""The static shape of a Hugging Face decoder (Qwen2 / Qwen2.5, Qwen3, Llama 3.x), read from
and written to `config.json`.

`DecoderConfig` is one record for the three families; what differs is a handful of flags
(biases on q/k/v, RMSNorm on q and k, tied head, RoPE scaling). `from_hf_config` reads both
ways transformers writes RoPE settings: v4's top-level `rope_theta` with an optional
`rope_scaling` dict, and v5's `rope_parameters: {rope_theta, rope_type, ...}`. Whatever this
module does not implement (another architecture, sliding-window layers, another activation or
RoPE type) is a `CheckpointError` naming the file and the setting, never a silent difference.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from rlax_trpo.errors import ConfigError

ARCHITECTURES = {
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "LlamaForCausalLM": "llama",
}
ROPE_TYPES = ("default", "llama3")


class CheckpointError(ConfigError):
    """A checkpoint folder this library cannot read as it is: one line naming the file and
    the tensor or setting (a `ConfigError`, so the command line exits with status 2)."""


class RopeScaling(NamedTuple):
    """Llama 3.x's frequency-dependent RoPE scaling (`rope_type: llama3`)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


class DecoderConfig(NamedTuple):
    """Everything that fixes the shapes and the maths of one decoder.

    Attributes:
      family: "qwen2", "qwen3" or "llama" (the architecture the checkpoint names).
      vocab_size, hidden_size, intermediate_size, num_layers: the usual sizes.
      num_heads, num_kv_heads, head_dim: query heads, key/value heads (grouped-query attention
        when fewer), width of a head (Qwen3 sets it apart from hidden / heads).
      rms_norm_eps: epsilon of every RMSNorm.
      rope_theta: RoPE base; rope_scaling: Llama 3's scaling, or None.
      qkv_bias: biases on the q, k and v projections (Qwen2; Llama's `attention_bias`).
      o_bias: a bias on the output projection (Llama's `attention_bias`).
      mlp_bias: biases in the SwiGLU projections (Llama's `mlp_bias`).
      qk_norm: RMSNorm over head_dim on queries and keys before RoPE (Qwen3).
      tie_word_embeddings: the head is the embedding's transpose (no `lm_head.weight`).
      max_position_embeddings: the longest context the checkpoint was built for.
      dtype: compute dtype ("float32" or "bfloat16"); norms, softmax and logits run in fp32.
      param_dtype: the dtype parameters are held in.
      lora_rank, lora_alpha, lora_targets: low-rank adapters on the named projections
        (`rank` 0: none), `alpha / rank` their scale (Hu et al. 2021).
      remat: recompute each layer's activations in the backward pass (less memory).
    """

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    dtype: str = "float32"
    param_dtype: str = "float32"
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = ()
    remat: bool = False

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.num_heads // self.num_kv_heads


def rope_inverse_frequencies(cfg: DecoderConfig) -> np.ndarray:
    """`[head_dim / 2]` float32 inverse frequencies theta^(-2i/d) (Su et al. 2021), with
    Llama 3's scaling where the config has it: wavelengths above
    `original_max / low_freq_factor` divided by `factor`, those below
    `original_max / high_freq_factor` kept, a linear blend in between (Meta's Llama 3.1
    reference code; transformers' `_compute_llama3_parameters`)."""
    dim = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    s = cfg.rope_scaling
    if s is None:
        return inv.astype(np.float32)
    wavelen = 2 * math.pi / inv
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    scaled = np.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)


def _rope(raw: dict[str, Any], where: str) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) from either transformers v5's `rope_parameters` or v4's
    top-level `rope_theta` and `rope_scaling`."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" not in params and params:
        params = next(iter(params.values()))  # per-layer-type form: one kind of layer here
    if not isinstance(params, dict):
        params = dict(raw.get("rope_scaling") or {})
        params.setdefault("rope_theta", raw.get("rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise CheckpointError(
            f"{where}: rope_type {kind!r} is not supported (supported: {', '.join(ROPE_TYPES)})"
        )
    theta = float(params["rope_theta"])
    if kind == "default":
        return theta, None
    try:
        scaling = RopeScaling(
            float(params["factor"]),
            float(params["low_freq_factor"]),
            float(params["high_freq_factor"]),
            int(params["original_max_position_embeddings"]),
        )
    except KeyError as err:
        raise CheckpointError(f"{where}: rope_type llama3 needs {err.args[0]!r}") from None
    return theta, scaling


def _check_supported(raw: dict[str, Any], where: str) -> str:
    """The family of a config.json, or a `CheckpointError` for what is not implemented."""
    names = raw.get("architectures") or []
    family = next((ARCHITECTURES[n] for n in names if n in ARCHITECTURES), None)
    if family is None:
        known = ", ".join(ARCHITECTURES)
        found = names or raw.get("model_type")
        raise CheckpointError(f"{where}: architecture {found} is not supported ({known} are)")
    if raw.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{where}: hidden_act {raw['hidden_act']!r} is not supported")
    layer_types = set(raw.get("layer_types") or ["full_attention"])
    if raw.get("use_sliding_window") or layer_types != {"full_attention"}:
        raise CheckpointError(f"{where}: sliding-window attention layers are not supported")
    return family


def from_hf_config(raw: dict[str, Any], where: str = "config.json", **overrides) -> DecoderConfig:
    """A `DecoderConfig` from the dict of a checkpoint's `config.json` (`where` names the file
    in errors); `overrides` set the fields config.json does not hold (dtype, LoRA, remat)."""
    family = _check_supported(raw, where)
    try:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        theta, scaling = _rope(raw, where)
        attention_bias = bool(raw.get("attention_bias", False))
        cfg = DecoderConfig(
            family=family,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            qkv_bias=family == "qwen2" or attention_bias,
            o_bias=family != "qwen2" and attention_bias,
            mlp_bias=bool(raw.get("mlp_bias", False)),
            qk_norm=family == "qwen3",
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 32768)),
        )
    except KeyError as err:
        raise CheckpointError(f"{where}: missing setting {err.args[0]!r}") from None
    if cfg.num_heads % cfg.num_kv_heads:
        raise CheckpointError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{cfg.num_kv_heads}"
        )
    return cfg._replace(**overrides)


def to_hf_config(cfg: DecoderConfig, torch_dtype: str = "float32") -> dict[str, Any]:
    """The `config.json` of `cfg` in transformers v4's form (which v4 and v5 both read)."""
    architecture = {v: k for k, v in ARCHITECTURES.items()}[cfg.family]
    out: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": cfg.family,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "max_position_embeddings": cfg.max_position_embeddings,
        "torch_dtype": torch_dtype,
    }
    if cfg.family != "qwen2":
        out["attention_bias"] = cfg.qkv_bias
    if cfg.family == "llama":
        out["mlp_bias"] = cfg.mlp_bias
    if cfg.rope_scaling is not None:
        out["rope_scaling"] = {"rope_type": "llama3", **cfg.rope_scaling._asdict()}
    return out
