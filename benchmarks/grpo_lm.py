"""Throughput of the GRPO language-model iteration on this machine.

Prints, for the default model (2 layers, width 64, 4 heads) on a task's config:
  * sampled tokens/s of the KV-cache sampler, next to a reference measured in the same run:
    the same sampler without a cache (a full forward pass over the padded sequence per token);
  * trained tokens/s of make_batch + update (pi_old/pi_ref scoring, mu epochs x minibatches);
  * the share of a whole jitted iteration spent sampling.

    python benchmarks/grpo_lm.py                       # sort, 32 prompts x 16 completions
    python benchmarks/grpo_lm.py --config configs/grpo_lm_add.yaml --repeats 20
"""

from __future__ import annotations

import argparse
import time

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import jax.numpy as jnp

from rlax_trpo.config import load_config
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.model import Transformer, init_params
from rlax_trpo.lm.sampling import tempered_log_softmax
from rlax_trpo.lm.tasks import EOS, PAD


def no_cache_sampler(model, params, prompts, key, max_new_tokens, temperature):
    """Reference: each step runs the full model over the whole (padded) sequence. The tiny
    tasks' prompts all have one length (no left padding), so no position offsets are needed."""
    tokens = prompts.tokens
    batch, plen = tokens.shape
    seq = jnp.concatenate([tokens, jnp.full((batch, max_new_tokens), PAD, tokens.dtype)], 1)

    def step(carry, t):
        seq, done, key = carry
        key, sub = jax.random.split(key)
        logits, _ = model.apply(params, seq)
        last = jax.lax.dynamic_index_in_dim(logits, plen + t - 1, axis=1, keepdims=False)
        token = jax.random.categorical(sub, tempered_log_softmax(last, temperature))
        token = jnp.where(done, PAD, token).astype(seq.dtype)
        seq = jax.lax.dynamic_update_slice(seq, token[:, None], (0, plen + t))
        return (seq, done | (token == EOS), key), ~done

    (seq, _, _), alive = jax.lax.scan(
        step, (seq, jnp.zeros(batch, bool), key), jnp.arange(max_new_tokens)
    )
    return seq, alive.sum()


def timed(fn, *args, repeats):
    out = jax.block_until_ready(fn(*args))  # compile + warm up
    start = time.perf_counter()
    for _ in range(repeats):
        out = jax.block_until_ready(fn(*args))
    return (time.perf_counter() - start) / repeats, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/grpo_lm_sort.yaml")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("overrides", nargs="*", help="key=value overrides")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    task, mcfg, gcfg, hp = cfg.make_task(), cfg.model_cfg(), cfg.grpo_cfg(), cfg.hp
    model = Transformer(mcfg)
    grpo = make_grpo(mcfg, task, gcfg)
    params = init_params(model, jax.random.key(0))
    state = grpo.init(jax.random.key(1), params, hp)
    key = jax.random.key(2)
    b, c = gcfg.num_prompts * gcfg.group_size, gcfg.max_new_tokens
    print(f"device {jax.devices()[0].device_kind}; task {task.name}; model {mcfg}")
    print(f"batch {b} sequences x {task.prompt_len}+{c} tokens, mu={gcfg.num_epochs}")

    collect = jax.jit(grpo.collect)
    t_collect, rollout = timed(collect, params, key, hp, repeats=args.repeats)
    sampled = float(rollout.completion.mask.sum())
    prompts = rollout.prompts
    reference = jax.jit(lambda p, x, k: no_cache_sampler(model, p, x, k, c, hp.temperature))
    t_ref, (_, ref_tokens) = timed(reference, params, prompts, key, repeats=args.repeats)

    def train_step(params, ref_params, rollout, key):
        batch, _ = grpo.make_batch(params, ref_params, rollout, hp)
        return grpo.update(params, state.opt_state, batch, hp, key)[2]["loss/total"]

    ref_params = jax.tree.map(jnp.copy, params)  # a separate argument: no shared forward pass
    t_train, _ = timed(jax.jit(train_step), params, ref_params, rollout, key, repeats=args.repeats)
    iteration = jax.jit(grpo.iteration)
    t_iter, _ = timed(iteration, state, hp, repeats=args.repeats)

    print(f"sampling (KV cache, + prompts and rewards): {sampled / t_collect:12,.0f} tokens/s")
    print(
        f"sampling without cache (reference):         {float(ref_tokens) / t_ref:12,.0f} tokens/s"
    )
    print(
        f"scoring + update (mu={gcfg.num_epochs}):                   "
        f"{sampled * gcfg.num_epochs / t_train:12,.0f} trained tokens/s"
    )
    print(
        f"whole iteration: {t_iter * 1e3:.1f} ms; sampling {t_collect * 1e3:.1f} ms "
        f"= {100 * t_collect / t_iter:.0f}% of it"
    )


if __name__ == "__main__":
    main()
