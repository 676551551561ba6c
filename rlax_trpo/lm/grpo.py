"""GRPO for question-answer language models: the whole iteration in one traceable function.

    prompts -> G completions each (KV-cache sampler) -> verifiable rewards
      -> group-relative advantages -> mu epochs x minibatches of the token-level clipped loss
      with a KL penalty to the reference policy -> (optional) reference refresh.

Shao et al. 2024 (DeepSeekMath), eq. 3 with outcome supervision; loss aggregation choices from
DAPO (Yu et al. 2025, token mean, decoupled clip) and Dr. GRPO (Liu et al. 2025, no std,
constant normaliser). `LMGRPOConfig.loss_type` chooses among the loss family of TRL 1.16 (grpo,
dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo; see `policy_loss`), `importance_sampling_level`
between token ratios and GSPO's sequence ratio (Zheng et al. 2025). The loss is a pure function
of per-token log-probs (`policy_loss`), checked number for number against TRL's own
`GRPOTrainer._compute_loss` in tests/test_lm_losses_trl.py. Library code never jits: call sites
wrap `GRPO.iteration` in `jax.jit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from rlax_trpo.advantages import group_relative_advantages
from rlax_trpo.algorithms.common import epochs_of_minibatches, minibatches
from rlax_trpo.lm.model import ModelConfig, Transformer
from rlax_trpo.lm.objectives import policy_loss
from rlax_trpo.lm.sampling import Completion, completion_logits, sample, token_logprobs
from rlax_trpo.lm.tasks import EOS, Task, sample_train, score
from rlax_trpo.lm.types import LMBatch, LMGRPOConfig, LMGRPOState, LMHParams
from rlax_trpo.losses import masked_mean
from rlax_trpo.platform import finish_computations_at_exit


class Rollout(NamedTuple):
    """`B = N * G` sampled sequences (group members adjacent) and their rewards."""

    prompts: jax.Array  # [B, P]
    targets: jax.Array  # [B, A + 1]
    completion: Completion  # [B, C] fields
    rewards: jax.Array  # [B]
    exact: jax.Array  # [B] bool


class GRPO(NamedTuple):
    """The algorithm as pure functions (call sites jit them)."""

    init: Callable[[jax.Array, dict, LMHParams], LMGRPOState]
    iteration: Callable[[LMGRPOState, LMHParams], tuple[LMGRPOState, dict]]
    evaluate: Callable[[dict, jax.Array, jax.Array, jax.Array], dict]
    # the pieces of `iteration`, exposed for benchmarks and notebooks
    collect: Callable[[dict, jax.Array, LMHParams], Rollout]
    make_batch: Callable[[dict, dict, Rollout, LMHParams], tuple[LMBatch, dict]]
    update: Callable[..., tuple]


# ----------------------------------------------------------------------------- algorithm


def make_clipped_adam() -> optax.GradientTransformation:
    """Adam after optax's global-norm clipping, all three settings injected hyperparameters
    (learning rate, clipping norm, Adam's eps: traced, so vmappable and sweepable), written
    per call from `LMHParams` by `set_clipped_adam_hparams`.

    What differs from the control algorithms' `rlax_trpo.algorithms.common.make_optimizer`:
    the clip is inside the optimiser (theirs is `optimizer_step`'s, outside it), Adam's eps is
    an `hp:` value (theirs a static field), and there is no SGD.
    """

    def factory(learning_rate, max_grad_norm, adam_eps):
        return optax.chain(
            optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=adam_eps)
        )

    return optax.inject_hyperparams(factory)(learning_rate=1e-3, max_grad_norm=1.0, adam_eps=1e-8)


def set_clipped_adam_hparams(opt_state, hp: LMHParams, learning_rate: jax.Array):
    """A `make_clipped_adam` state with this call's (traced) `learning_rate`,
    `hp.max_grad_norm` and `hp.adam_eps` written into its injected hyperparameters."""
    values = {
        "learning_rate": learning_rate,
        "max_grad_norm": hp.max_grad_norm,
        "adam_eps": hp.adam_eps,
    }
    hyper = dict(opt_state.hyperparams)
    for name, value in values.items():
        hyper[name] = jnp.asarray(value, jnp.asarray(hyper[name]).dtype)
    return opt_state._replace(hyperparams=hyper)


def grpo_loss(
    params, batch: LMBatch, hp: LMHParams, cfg: LMGRPOConfig, apply_fn
) -> tuple[jax.Array, dict]:
    """`policy_loss` of the log-probs that `apply_fn(params)` gives the batch's completion
    tokens (at the sampling temperature)."""
    logits = completion_logits(apply_fn, params, batch.prompts, batch.tokens)
    logp, _ = token_logprobs(logits, batch.tokens, hp.temperature)
    return policy_loss(logp, batch, hp, cfg)


def make_grpo(model_config: ModelConfig, task: Task, cfg: LMGRPOConfig) -> GRPO:
    """Build the GRPO iteration for `task` with a `Transformer(model_config)` policy.

    The three come from one validated `grpo_lm` configuration, which has checked them
    (e.g. that `cfg.max_new_tokens` leaves room for the task's answer and EOS):

        make_grpo(config.model_cfg(), config.make_task(), config.grpo_cfg())
    """
    finish_computations_at_exit()  # a script may end while its run is computed
    model = Transformer(model_config)
    apply_fn = model.apply
    optimizer = make_clipped_adam()

    def init(key: jax.Array, params, hp: LMHParams) -> LMGRPOState:
        """The GRPO state of a policy `params` that is also the reference policy."""
        opt_state = set_clipped_adam_hparams(optimizer.init(params), hp, hp.learning_rate)
        return LMGRPOState(params, params, opt_state, key, jnp.zeros((), jnp.int32))

    def collect(params, key, hp: LMHParams) -> Rollout:
        """N prompts from the training split, G completions each, scored."""
        k_prompt, k_sample = jax.random.split(key)
        prompts, targets = sample_train(task, k_prompt, cfg.num_prompts)
        prompts = jnp.repeat(prompts, cfg.group_size, axis=0)  # group members adjacent
        targets = jnp.repeat(targets, cfg.group_size, axis=0)
        completion = sample(
            apply_fn, params, model_config, prompts, k_sample, cfg.max_new_tokens, hp.temperature
        )
        rewards, exact = score(completion.tokens, targets, hp.partial_credit)
        return Rollout(prompts, targets, completion, rewards, exact)

    def make_batch(params, ref_params, rollout: Rollout, hp: LMHParams) -> tuple[LMBatch, dict]:
        """Group advantages, zero-variance weights, and pi_old / pi_ref log-probs."""
        rewards = rollout.rewards.reshape(cfg.num_prompts, cfg.group_size)
        kind = "grpo" if cfg.scale_rewards else "dr_grpo"
        adv, nonzero = group_relative_advantages(rewards, kind, cfg.std_ddof, hp.std_floor)
        seq_weight = jnp.ones_like(adv)
        if cfg.mask_zero_std:
            seq_weight = jnp.broadcast_to(nonzero[:, None], adv.shape).astype(jnp.float32)
        c = rollout.completion
        old_logits = completion_logits(apply_fn, params, rollout.prompts, c.tokens)
        old_logp, entropy = token_logprobs(old_logits, c.tokens, hp.temperature)
        ref_logits = completion_logits(apply_fn, ref_params, rollout.prompts, c.tokens)
        ref_logp, _ = token_logprobs(ref_logits, c.tokens, hp.temperature)
        seq_weight = seq_weight.reshape(-1)
        # every minibatch divides by its share of the whole batch's tokens (batch_token_mean)
        tokens = jnp.sum(seq_weight * c.mask.sum(axis=1)) / cfg.num_minibatches
        batch = LMBatch(
            rollout.prompts,
            c.tokens,
            c.mask,
            adv.reshape(-1),
            seq_weight,
            jax.lax.stop_gradient(old_logp),
            jax.lax.stop_gradient(ref_logp),
            jnp.full(seq_weight.shape, tokens),
        )
        metrics = {
            "grpo/zero_std_frac": 1.0 - nonzero.mean(),
            "grpo/adv_mean": adv.mean(),
            "grpo/adv_std": adv.std(),
            "grpo/adv_abs_max": jnp.abs(adv).max(),
            "policy/entropy": masked_mean(entropy, c.mask),
            "policy/sample_logprob_gap": masked_mean(jnp.abs(old_logp - c.logprobs), c.mask),
        }
        return batch, metrics

    def update(params, opt_state, batch: LMBatch, hp: LMHParams, key) -> tuple:
        """mu epochs x minibatches of Adam steps on the GRPO loss."""
        opt_state = set_clipped_adam_hparams(opt_state, hp, hp.learning_rate)
        grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)

        def minibatch_step(carry, mb: LMBatch):
            params, opt_state = carry
            (loss, aux), grads = grad_fn(params, mb, hp, cfg, apply_fn)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            aux = {**aux, "loss/total": loss, "loss/grad_norm": optax.tree.norm(grads)}
            return (params, opt_state), aux

        (params, opt_state), aux = epochs_of_minibatches(
            minibatch_step,
            (params, opt_state),
            key,
            cfg.num_epochs,
            lambda k: minibatches(batch, k, cfg.num_minibatches),
        )
        metrics = jax.tree.map(jnp.mean, aux)  # [epochs, minibatches] -> scalar
        metrics["grpo/ratio_first"] = aux["grpo/ratio_mean"][0, 0]
        return params, opt_state, metrics

    def iteration(state: LMGRPOState, hp: LMHParams) -> tuple[LMGRPOState, dict]:
        """One GRPO iteration: collect -> make_batch -> update -> (reference refresh)."""
        key, k_collect, k_update = jax.random.split(state.key, 3)
        rollout = collect(state.params, k_collect, hp)
        batch, batch_metrics = make_batch(state.params, state.ref_params, rollout, hp)
        params, opt_state, update_metrics = update(
            state.params, state.opt_state, batch, hp, k_update
        )
        step = state.step + 1
        ref_params = state.ref_params
        if cfg.ref_refresh_every > 0:
            refresh = step % cfg.ref_refresh_every == 0
            ref_params = jax.tree.map(lambda p, r: jnp.where(refresh, p, r), params, ref_params)
        c = rollout.completion
        metrics = {
            "reward/mean": rollout.rewards.mean(),
            "accuracy/sample": rollout.exact.mean(),
            "completion/length_mean": c.lengths.mean(),
            "completion/length_max": c.lengths.max(),
            "completion/eos_frac": (c.tokens == EOS).any(axis=1).mean(),
            **batch_metrics,
            **update_metrics,
        }
        metrics = {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
        return LMGRPOState(params, ref_params, opt_state, key, step), metrics

    def evaluate(params, prompts: jax.Array, targets: jax.Array, key: jax.Array) -> dict:
        """Greedy completions of `prompts`: exact-match accuracy, mean length, the tokens."""
        c = sample(
            apply_fn, params, model_config, prompts, key, cfg.max_new_tokens, 1.0, greedy=True
        )
        _, exact = score(c.tokens, targets, 0.0)
        return {"accuracy": exact.mean(), "length_mean": c.lengths.mean(), "tokens": c.tokens}

    return GRPO(init, iteration, evaluate, collect, make_batch, update)
