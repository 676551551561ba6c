"""The Hugging Face decoders without transformers: config.json in both of transformers' forms,
Llama 3's RoPE scaling by its formula, the cache and left padding, chunked log-probs, LoRA, the
safetensors round trip (single file, sharded, bf16) and every loader error as one line.
Parity with transformers itself: tests/test_lm_hf_compare.py (the `compare` extra)."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.lm.hf.checkpoint import load_params, read_decoder_config, save_pretrained
from rlax_trpo.lm.hf.config import (
    CheckpointError,
    DecoderConfig,
    RopeScaling,
    from_hf_config,
    rope_inverse_frequencies,
    to_hf_config,
)
from rlax_trpo.lm.hf.model import DecoderLM, init_decoder, init_decoder_cache
from rlax_trpo.lm.policy import combine, decoder_policy, init_adapters, split_trainable
from rlax_trpo.lm.sampling import chunked_logprobs, sample, token_logprobs

pytest.importorskip("safetensors")

BASE = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
)
FAMILIES = {
    "qwen2": DecoderConfig("qwen2", **BASE, qkv_bias=True, tie_word_embeddings=True),
    "qwen3": DecoderConfig("qwen3", **{**BASE, "head_dim": 16}, qk_norm=True),
    "llama": DecoderConfig(
        "llama", **BASE, rope_theta=500000.0, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 16)
    ),
}


def _params(cfg, seed=0, scale=0.3):
    """Random parameters far from uniform logits (as transformers' own tests rescale)."""
    params = init_decoder(cfg, jax.random.key(seed))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    noisy = [x + scale * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return jax.tree.unflatten(tree, noisy)


# ----------------------------------------------------------------------------- config.json


def _v4(rope_scaling=None, **extra):
    raw = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rope_theta": 500000.0,
        "rope_scaling": rope_scaling,
        **extra,
    }
    return raw


LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def test_both_ways_of_writing_rope_settings_read_alike():
    v4 = from_hf_config(_v4(LLAMA3))
    v5_raw = {k: v for k, v in _v4().items() if k not in ("rope_theta", "rope_scaling")}
    v5 = from_hf_config({**v5_raw, "rope_parameters": {**LLAMA3, "rope_theta": 500000.0}})
    assert v4 == v5 and v4.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)
    assert v4.head_dim == 8 and v4.group_size == 2 and not v4.qkv_bias
    plain = from_hf_config(
        {**v5_raw, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    )
    assert plain.rope_scaling is None and plain.rope_theta == 1e6
    # the config we write reads back as itself
    assert from_hf_config(to_hf_config(v4)) == v4
    for family, cfg in FAMILIES.items():
        assert from_hf_config(to_hf_config(cfg)) == cfg, family


def test_llama3_frequencies_by_their_formula():
    old = 512  # wavelengths 6.3, 167, 4450, 118000: one kept, one blended, two divided
    cfg = from_hf_config(_v4({**LLAMA3, "original_max_position_embeddings": old}))
    inv = rope_inverse_frequencies(cfg).astype(np.float64)
    base = 1.0 / 500000.0 ** (np.arange(0, 8, 2) / 8)
    kinds = []
    for f, b in zip(inv, base, strict=True):
        wavelen = 2 * math.pi / b
        if wavelen < old / 4:  # short wavelengths kept (high_freq_factor 4)
            kinds.append("kept")
            assert f == pytest.approx(b, rel=1e-6)
        elif wavelen > old / 1:  # long ones divided by the factor (low_freq_factor 1)
            kinds.append("divided")
            assert f == pytest.approx(b / 8, rel=1e-6)
        else:  # a blend in between
            kinds.append("blended")
            smooth = (old / wavelen - 1) / (4 - 1)
            assert f == pytest.approx((1 - smooth) * b / 8 + smooth * b, rel=1e-6)
    assert kinds == ["kept", "blended", "divided", "divided"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": ["GPT2LMHeadModel"]}, "architecture"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn'"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "needs 'low_freq_factor'"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"use_sliding_window": True}, "sliding-window"),
        ({"num_key_value_heads": 3}, "not a multiple"),
        ({"vocab_size": None}, None),
    ],
)
def test_what_is_not_implemented_is_one_line(change, message):
    raw = {**_v4(), **change}
    if change.get("vocab_size", 0) is None:
        del raw["vocab_size"]
        message = "missing setting 'vocab_size'"
    with pytest.raises(CheckpointError, match=message) as err:
        from_hf_config(raw, "folder/config.json")
    assert str(err.value).startswith("folder/config.json: ") and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- the model


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cached_decoding_and_left_padding_give_the_full_forward_logits(family):
    cfg = FAMILIES[family]
    model, params = DecoderLM(cfg), _params(cfg)
    ids = jax.random.randint(jax.random.key(3), (3, 9), 0, cfg.vocab_size)
    full, _ = jax.jit(model.apply)(params, ids)
    # one batch, its rows left-padded by 0, 2 and 5 slots (the padding holds any id): the same
    # logits on the real tokens (right-padded to one width; causal attention ignores that)
    pad = [0, 2, 5]
    padded = jnp.stack(
        [jnp.concatenate([jnp.full(p, 7), ids[b], jnp.full(5 - p, 7)]) for b, p in enumerate(pad)]
    )
    logits, _ = jax.jit(model.apply)(params, padded, 0, None, jnp.array(pad))
    got = jnp.stack([logits[b, p : p + 9] for b, p in enumerate(pad)])
    np.testing.assert_allclose(got, full, atol=2e-5)
    # prefill 4 tokens into the cache, then one token at a time
    cache = init_decoder_cache(cfg, 3, 12)
    assert cache.k.shape == (cfg.num_layers, 3, 12, cfg.num_kv_heads, cfg.head_dim)
    step = jax.jit(model.apply)
    logits, cache = step(params, ids[:, :4], 0, cache)
    parts = [logits]
    for t in range(4, 9):
        logits, cache = step(params, ids[:, t : t + 1], t, cache)
        parts.append(logits)
    np.testing.assert_allclose(jnp.concatenate(parts, 1), full, atol=2e-5)


def test_the_sampler_with_several_end_ids_and_left_padding():
    cfg = FAMILIES["qwen2"]
    params = _params(cfg, scale=0.6)
    policy = decoder_policy(cfg, (3, 4), 0, 20)
    prompts = jax.random.randint(jax.random.key(1), (16, 6), 5, cfg.vocab_size)
    pad = jnp.arange(16) % 4  # prompts of 6, 5, 4 and 3 tokens
    run = jax.jit(
        lambda p, k: sample(
            policy.apply,
            p,
            policy.init_cache(16, 20),
            prompts,
            k,
            12,
            3.0,
            False,
            pad,
            policy.eos_ids,
            policy.pad_id,
        )
    )
    c = run(params, jax.random.key(2))
    tokens, mask = np.asarray(c.tokens), np.asarray(c.mask)
    ended = 0
    for row, m in zip(tokens, mask, strict=True):
        ends = np.flatnonzero(np.isin(row, (3, 4)))
        n = ends[0] + 1 if ends.size else len(row)
        ended += bool(ends.size)
        assert m[:n].all() and not m[n:].any() and (row[n:] == 0).all()
    assert ended >= 4, "a hot sampler over a small vocabulary ends some rows with either id"
    assert {3, 4} & set(tokens.ravel().tolist()) == {3, 4}
    # the sampler's log-probs are the full forward pass's over the padded prompts
    logp, _ = jax.jit(policy.logprobs)(params, prompts, pad, c.tokens, 3.0)
    np.testing.assert_allclose(c.logprobs, logp * c.mask, atol=3e-5)


def test_chunked_logprobs_and_their_gradients_equal_the_whole():
    cfg = FAMILIES["llama"]
    model, params = DecoderLM(cfg), _params(cfg)
    hidden = jax.random.normal(jax.random.key(4), (3, 11, cfg.hidden_size))
    tokens = jax.random.randint(jax.random.key(5), (3, 11), 0, cfg.vocab_size)

    def loss(p, chunk):
        head = lambda h: model.apply(p, h, method=DecoderLM.logits)
        if chunk is None:
            logp, ent = token_logprobs(head(hidden), tokens, 0.7)
        else:
            logp, ent = chunked_logprobs(head, hidden, tokens, 0.7, chunk)
        return jnp.sum(logp * jnp.arange(11)) + jnp.sum(ent), (logp, ent)

    (whole, (logp, ent)), g_whole = jax.value_and_grad(loss, has_aux=True)(params, None)
    for chunk in (1, 4, 11, 64):
        (part, (lp, en)), g_part = jax.value_and_grad(loss, has_aux=True)(params, chunk)
        np.testing.assert_allclose(lp, logp, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(en, ent, rtol=1e-5, atol=1e-5)
        for a, b in zip(jax.tree.leaves(g_part), jax.tree.leaves(g_whole), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_fresh_lora_adapters_leave_the_model_as_it_was_and_export_merged(tmp_path):
    cfg = FAMILIES["qwen3"]._replace(
        lora_rank=4, lora_alpha=8.0, lora_targets=("q_proj", "up_proj")
    )
    base = _params(cfg._replace(lora_rank=0, lora_targets=()))
    lora = init_adapters(cfg, jax.random.key(9))
    paths = {"/".join(k.key for k in path) for path, _ in jax.tree.flatten_with_path(lora)[0]}
    assert paths == {
        "params/layers/self_attn/q_proj/lora_a",
        "params/layers/self_attn/q_proj/lora_b",
        "params/layers/mlp/up_proj/lora_a",
        "params/layers/mlp/up_proj/lora_b",
    }
    ids = jax.random.randint(jax.random.key(6), (2, 7), 0, cfg.vocab_size)
    plain, _ = DecoderLM(cfg._replace(lora_rank=0, lora_targets=())).apply(base, ids)
    fresh, _ = DecoderLM(cfg).apply(combine(base, lora), ids)
    np.testing.assert_array_equal(fresh, plain)  # B = 0: exactly the model
    trained = jax.tree.map(lambda x: x + 0.1, lora)  # B != 0
    adapted, _ = DecoderLM(cfg).apply(combine(base, trained), ids)
    assert np.abs(adapted - plain).max() > 1e-2
    frozen, again = split_trainable(combine(base, trained), True)
    assert jax.tree.structure(again) == jax.tree.structure(lora)
    assert jax.tree.structure(frozen) == jax.tree.structure(base)
    save_pretrained(combine(base, trained), cfg, tmp_path)  # W + (alpha / r) A B
    plain_cfg = read_decoder_config(tmp_path)
    merged = load_params(tmp_path, plain_cfg, init_decoder(plain_cfg, jax.random.key(0)))
    exported, _ = DecoderLM(plain_cfg).apply(merged, ids)
    np.testing.assert_allclose(exported, adapted, atol=1e-4)


# ----------------------------------------------------------------------------- safetensors


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("shard", [None, 20_000])
def test_save_and_load_round_trip(tmp_path, family, shard):
    cfg = FAMILIES[family]
    params = jax.device_get(_params(cfg))
    save_pretrained(params, cfg, tmp_path, max_shard_bytes=shard)
    files = sorted(p.name for p in tmp_path.iterdir())
    if shard:
        assert "model.safetensors.index.json" in files and len(files) > 3
    else:
        assert files == ["config.json", "model.safetensors"]
    assert read_decoder_config(tmp_path) == cfg
    loaded = load_params(
        tmp_path, cfg, jax.eval_shape(lambda: init_decoder(cfg, jax.random.key(0)))
    )
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bfloat16_files_load(tmp_path):
    cfg = FAMILIES["qwen2"]
    params = jax.device_get(_params(cfg))
    save_pretrained(params, cfg, tmp_path, dtype="bfloat16")
    loaded = load_params(
        tmp_path, cfg._replace(param_dtype="bfloat16"), init_decoder(cfg, jax.random.key(0))
    )
    leaf = jax.tree.leaves(loaded)[0]
    assert leaf.dtype == jnp.bfloat16
    rounded = jax.tree.map(lambda x: np.asarray(x).astype(jnp.bfloat16), params)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(rounded), strict=True):
        np.testing.assert_array_equal(a, b)


def _saved(tmp_path, family="qwen2"):
    cfg = FAMILIES[family]
    save_pretrained(jax.device_get(_params(cfg)), cfg, tmp_path)
    return cfg


def _rewrite(path, change):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    with safe_open(str(path), framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    change(tensors)
    save_file(tensors, str(path))


UP, EXTRA, NORM = "model.layers.1.mlp.up_proj.weight", "model.extra.weight", "model.norm.weight"
Q = "model.layers.0.self_attn.q_proj.weight"
BROKEN = [
    (lambda t: t.pop(UP), f"{UP} is missing"),
    (lambda t: t.update({EXTRA: np.zeros(3, np.float32)}), f"{EXTRA} is not used"),
    (
        lambda t: t.update({NORM: np.ones(5, np.float32)}),
        r"model.norm.weight has shape \(5,\), the config needs \(32,\)",
    ),
    (
        lambda t: t.update({Q: np.ones((32, 33), np.float32)}),
        r"q_proj.weight has shape \(32, 33\), the config needs \(32, 32\)",
    ),
]


@pytest.mark.parametrize(("change", "message"), BROKEN)
def test_a_tensor_missing_extra_or_misshapen_is_one_line_naming_it(tmp_path, change, message):
    cfg = _saved(tmp_path)
    _rewrite(tmp_path / "model.safetensors", change)
    with pytest.raises(CheckpointError, match=message) as err:
        load_params(tmp_path, cfg, init_decoder(cfg, jax.random.key(0)))
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def test_missing_and_broken_files_are_one_line(tmp_path):
    cfg = _saved(tmp_path)
    template = init_decoder(cfg, jax.random.key(0))
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="model.safetensors: not a safetensors file"):
        load_params(tmp_path, cfg, template)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="neither model.safetensors nor"):
        load_params(tmp_path, cfg, template)
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "gone.safetensors"}})
    )
    with pytest.raises(CheckpointError, match="names gone.safetensors, which is missing"):
        load_params(tmp_path, cfg, template)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: cannot be read as JSON"):
        read_decoder_config(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json: no such file"):
        read_decoder_config(tmp_path)


def test_rope_turns_each_pair_i_and_i_plus_half_by_position_times_frequency():
    from rlax_trpo.lm.hf.model import apply_rope

    inv_freq = jnp.array([1.0, 0.1, 0.01, 0.001])  # head_dim 8: pairs (0, 4), (1, 5), ...
    positions = jnp.array([[0, 3, 10]])
    for i in range(4):
        x = jnp.zeros((1, 3, 1, 8)).at[..., i].set(1.0)  # the pair's first coordinate
        out = np.asarray(apply_rope(x, positions, inv_freq))[0, :, 0]
        angle = np.asarray(positions[0]) * float(inv_freq[i])
        np.testing.assert_allclose(out[:, i], np.cos(angle), atol=1e-6)
        np.testing.assert_allclose(out[:, i + 4], np.sin(angle), atol=1e-6)
        others = np.delete(out, [i, i + 4], axis=1)
        np.testing.assert_allclose(others, 0.0, atol=1e-6)


def test_grouped_query_attention_is_attention_with_each_kv_head_repeated():
    from rlax_trpo.lm.hf.model import grouped_attention

    b, s, kv, g, d = 2, 5, 2, 3, 4
    q = jax.random.normal(jax.random.key(0), (b, s, kv, g, d))
    k, v = jax.random.normal(jax.random.key(1), (2, b, s, kv, d))
    slots, pad = jnp.arange(s), jnp.array([0, 2])
    got = grouped_attention(q, k, v, slots, slots, pad).reshape(b, s, kv * g, d)
    # query head h reads key/value head h // g (transformers' repeat_kv)
    k_all, v_all = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
    qh = q.reshape(b, s, kv * g, d)
    scores = jnp.einsum("bshd,bthd->bhst", qh, k_all) / np.sqrt(d)
    seen = (slots[None, :] <= slots[:, None])[None] & (slots[None, None, :] >= pad[:, None, None])
    weights = jax.nn.softmax(jnp.where(seen[:, None], scores, -1e30), axis=-1)
    want = jnp.einsum("bhst,bthd->bshd", weights, v_all)
    np.testing.assert_allclose(got[:, 2:], want[:, 2:], atol=1e-5)  # rows past the padding
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)


def test_model_layout_splits_each_array_on_its_largest_divisible_axis():
    from jax.sharding import PartitionSpec as P

    from rlax_trpo.experiment.parallel import model_spec

    assert model_spec((2, 896, 4864), 4) == P(None, None, "model")  # a stacked MLP kernel
    assert model_spec((151936, 896), 4) == P("model")  # the embedding, over the vocabulary
    assert model_spec((2, 14, 64), 4) == P(None, None, "model")  # 14 heads: not divisible
    assert model_spec((3, 7), 4) == P()  # nothing divides: whole on every device
    assert model_spec((8, 12), 4, skip=1) == P(None, "model")  # the population axis kept
    assert model_spec((896,), 1) == P()  # one device


def test_grouped_query_heads_read_their_kv_head_as_transformers_repeats_it():
    # A model with 2 key/value heads for 4 query heads equals the same model with 4 key/value
    # heads whose projections repeat each of the 2 for its group (query heads 0, 1 -> 0;
    # 2, 3 -> 1), as transformers' repeat_kv does.
    cfg = FAMILIES["llama"]
    gqa = _params(cfg)
    mha_cfg = cfg._replace(num_kv_heads=cfg.num_heads)
    mha = jax.tree.map(lambda x: x, gqa)
    attn = mha["params"]["layers"]["self_attn"]
    for name in ("k_proj", "v_proj"):
        kernel = attn[name]["kernel"]  # [L, hidden, kv * head_dim]
        heads = kernel.reshape(*kernel.shape[:2], cfg.num_kv_heads, cfg.head_dim)
        repeated = jnp.repeat(heads, cfg.group_size, axis=2)
        attn[name] = {"kernel": repeated.reshape(*kernel.shape[:2], -1)}
    ids = jax.random.randint(jax.random.key(8), (2, 9), 0, cfg.vocab_size)
    want, _ = DecoderLM(mha_cfg).apply(mha, ids)
    got, _ = DecoderLM(cfg).apply(gqa, ids)
    np.testing.assert_allclose(got, want, atol=2e-5)
