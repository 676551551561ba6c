"""Supervised warm start on task-generated (prompt, answer) pairs; its result is pi_ref.

Teacher-forced cross-entropy on the target tokens (answer and EOS; PAD after EOS excluded):

    L = - sum_{i,t} m_it log pi(y_it | prompt_i, y_i,<t) / sum_{i,t} m_it
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax

from rlax_trpo.lm.grpo import make_clipped_adam, set_clipped_adam_hparams
from rlax_trpo.lm.model import ModelConfig, Transformer
from rlax_trpo.lm.sampling import completion_logits, token_logprobs
from rlax_trpo.lm.tasks import PAD, Task, sample_train
from rlax_trpo.lm.types import LMHParams
from rlax_trpo.losses import masked_mean


def sft_loss(params, apply_fn, prompts: jax.Array, targets: jax.Array) -> jax.Array:
    """Masked token-mean negative log-likelihood of `targets [B, A+1]` after `prompts [B, P]`."""
    chex.assert_rank([prompts, targets], 2)
    logits = completion_logits(apply_fn, params, prompts, targets)
    logp, _ = token_logprobs(logits, targets, 1.0)
    return -masked_mean(logp, (targets != PAD).astype(jnp.float32))


def warm_start(
    model_config: ModelConfig,
    task: Task,
    params,
    key: jax.Array,
    hp: LMHParams,
    num_steps: int,
    batch_size: int,
):
    """`num_steps` Adam steps of supervised learning; returns (params, losses `[num_steps]`)."""
    apply_fn = Transformer(model_config).apply
    optimizer = make_clipped_adam()
    opt_state = set_clipped_adam_hparams(optimizer.init(params), hp, hp.warm_start_learning_rate)

    def step(carry, step_key):
        params, opt_state = carry
        prompts, targets = sample_train(task, step_key, batch_size)
        loss, grads = jax.value_and_grad(sft_loss)(params, apply_fn, prompts, targets)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    (params, _), losses = jax.lax.scan(step, (params, opt_state), jax.random.split(key, num_steps))
    return params, losses


def sequence_nll(policy, variables, prompts, pad, completions, mask) -> jax.Array:
    """Masked token-mean negative log-likelihood of `completions [B, C]` after left-padded
    `prompts [B, P]` under an `LMPolicy` (its chunked log-probs)."""
    logp, _ = policy.logprobs(variables, prompts, pad, completions, 1.0)
    return -masked_mean(logp, mask)


def supervised_steps(policy, params, rows: dict, key: jax.Array, learning_rate, num_steps, batch):
    """`num_steps` Adam steps (clipped at norm 1) of `sequence_nll` on minibatches drawn from
    `rows` (`tokens`, `pad`, `solution`, `solution_mask`, `[N, ...]` each); every parameter
    of `params` trains. Returns (params, losses `[num_steps]`)."""
    optimizer = make_clipped_adam()
    hp = LMHParams()
    opt_state = set_clipped_adam_hparams(optimizer.init(params), hp, learning_rate)
    size = rows["tokens"].shape[0]

    def step(carry, step_key):
        params, opt_state = carry
        pick = jax.random.randint(step_key, (batch,), 0, size)
        mb = jax.tree.map(lambda x: x[pick], rows)
        loss, grads = jax.value_and_grad(
            lambda p: sequence_nll(
                policy, p, mb["tokens"], mb["pad"], mb["solution"], mb["solution_mask"]
            )
        )(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), loss

    keys = jax.random.split(key, num_steps)
    (params, _), losses = jax.lax.scan(step, (params, opt_state), keys)
    return params, losses
