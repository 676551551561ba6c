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

from rlax_trpo import losses
from rlax_trpo.advantages import group_relative_advantages
from rlax_trpo.algorithms.common import epochs_of_minibatches, minibatches
from rlax_trpo.algorithms.ppo import adapt_kl_beta
from rlax_trpo.lm.model import ModelConfig
from rlax_trpo.lm.natural import TRUST_REGION_UPDATES, make_natural_update, token_kl
from rlax_trpo.lm.objectives import policy_loss
from rlax_trpo.lm.policy import tiny_policy
from rlax_trpo.lm.sampling import Completion, completion_logits, sample, token_logprobs
from rlax_trpo.lm.tasks import Task, as_lm_task
from rlax_trpo.lm.types import (
    LMBatch,
    LMGRPOConfig,
    LMGRPOState,
    LMHParams,
    LMPolicy,
    LMShared,
    LMTask,
    Prompts,
)
from rlax_trpo.losses import masked_mean
from rlax_trpo.platform import finish_computations_at_exit


class Rollout(NamedTuple):
    """`B = N * G` sampled sequences (group members adjacent) and their rewards."""

    prompts: Prompts  # [B, P] tokens, [B] pad, [B, ...] target
    completion: Completion  # [B, C] fields
    rewards: jax.Array  # [B]
    exact: jax.Array  # [B] bool


class GRPO(NamedTuple):
    """The algorithm as pure functions (call sites jit them). `shared` is the `LMShared`
    every member reads (frozen weights, the task's data); it defaults to empty."""

    init: Callable[..., LMGRPOState]  # (key, params, hp) -> state
    iteration: Callable[..., tuple[LMGRPOState, dict]]  # (state, hp, shared) -> (state, metrics)
    evaluate: Callable[..., dict]  # (params, prompts: Prompts, key, shared) -> metrics
    # the pieces of `iteration`, exposed for benchmarks and notebooks
    collect: Callable[..., Rollout]
    make_batch: Callable[..., tuple[LMBatch, dict]]
    update: Callable[..., tuple]
    policy: LMPolicy
    task: LMTask


NO_SHARED = LMShared()
MODEL_AXIS = "model"  # the mesh axis of `--shard model` (rlax_trpo.experiment.parallel)


def shard_rows(tree):
    """Split the leading (batch) axis of every array of `tree` over the mesh's `model` axis
    where the program is traced under such a mesh (`--shard model`: the weights are split
    along the same axis, fully sharded data parallel); `tree` as it is otherwise. A hint to
    the partitioner: the values, and so the results, are the same."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or MODEL_AXIS not in mesh.axis_names:
        return tree
    size = mesh.shape[MODEL_AXIS]
    spec = jax.sharding.PartitionSpec(MODEL_AXIS)
    split = lambda x: jax.lax.with_sharding_constraint(x, spec)
    return jax.tree.map(lambda x: split(x) if x.ndim and x.shape[0] % size == 0 else x, tree)


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
    params, batch: LMBatch, hp: LMHParams, cfg: LMGRPOConfig, policy, weights=None
) -> tuple[jax.Array, dict]:
    """`policy_loss` of the log-probs that the policy with trained `params` (over the frozen
    `weights`) gives the batch's completion tokens, at the sampling temperature. `policy` is
    an `LMPolicy`, or a tiny model's `apply` function."""
    if not isinstance(policy, LMPolicy):
        logits = completion_logits(policy, params, batch.prompts, batch.tokens, batch.pad)
        logp, entropy = token_logprobs(logits, batch.tokens, hp.temperature)
    else:
        variables = policy.combine(weights, params)
        logp, entropy = policy.logprobs(
            variables, batch.prompts, batch.pad, batch.tokens, hp.temperature
        )
    if batch.old_logprobs is None:  # one pass over the batch: pi_old is this very policy
        batch = batch._replace(old_logprobs=jax.lax.stop_gradient(logp))
    loss, aux = policy_loss(logp, batch, hp, cfg)
    return loss, {**aux, "policy/entropy": masked_mean(entropy, batch.mask)}


def make_grpo(policy: LMPolicy | ModelConfig, task: LMTask | Task, cfg: LMGRPOConfig) -> GRPO:
    """Build the GRPO iteration of `policy` on `task` (a tiny model's `ModelConfig` and a
    generated `Task` are taken as they are).

    The three come from one validated `grpo_lm` configuration, which has checked them
    (e.g. that `cfg.max_new_tokens` leaves room for the task's answer and EOS):

        make_grpo(config.model_cfg(), config.make_task(), config.grpo_cfg())
    """
    finish_computations_at_exit()  # a script may end while its run is computed
    if isinstance(policy, ModelConfig):
        policy = tiny_policy(policy)
    if isinstance(task, Task):
        task = as_lm_task(task)
    optimizer = make_clipped_adam()
    length = task.prompt_len + cfg.max_new_tokens

    def generate(variables, prompts: Prompts, key, temperature, greedy=False) -> Completion:
        cache = policy.init_cache(prompts.tokens.shape[0], length)
        return sample(
            policy.apply,
            variables,
            cache,
            prompts.tokens,
            key,
            cfg.max_new_tokens,
            temperature,
            greedy,
            prompts.pad,
            policy.eos_ids,
            policy.pad_id,
        )

    def init(key: jax.Array, params, hp: LMHParams) -> LMGRPOState:
        """The GRPO state of trained `params` that are also the reference policy's."""
        opt_state = set_clipped_adam_hparams(optimizer.init(params), hp, hp.learning_rate)
        beta = jnp.asarray(hp.kl_beta, jnp.float32)
        return LMGRPOState(params, params, opt_state, key, jnp.zeros((), jnp.int32), beta)

    def completion_logprobs(params, batch: LMBatch, hp: LMHParams, shared=NO_SHARED):
        """The trained `params`' log-probs `[B, C]` of the batch's completion tokens."""
        variables = policy.combine(shared.weights, params)
        return policy.logprobs(variables, batch.prompts, batch.pad, batch.tokens, hp.temperature)[0]

    def collect(params, key, hp: LMHParams, shared=NO_SHARED) -> Rollout:
        """N prompts from the training split, G completions each, scored."""
        k_prompt, k_sample = jax.random.split(key)
        prompts = task.sample(shared.data, k_prompt, cfg.num_prompts)
        prompts = jax.tree.map(lambda x: jnp.repeat(x, cfg.group_size, axis=0), prompts)
        prompts = shard_rows(prompts)  # the B sequences over the devices, under --shard model
        variables = policy.combine(shared.weights, params)
        completion = generate(variables, prompts, k_sample, hp.temperature)
        rewards, exact = task.reward(
            shared.data, completion.tokens, completion.mask, prompts.target, hp
        )
        return Rollout(prompts, completion, rewards, exact)

    def make_batch(
        params, ref_params, rollout: Rollout, hp: LMHParams, shared=NO_SHARED
    ) -> tuple[LMBatch, dict]:
        """Group advantages, zero-variance weights, and pi_old / pi_ref log-probs."""
        rewards = rollout.rewards.reshape(cfg.num_prompts, cfg.group_size)
        kind = "grpo" if cfg.scale_rewards else "dr_grpo"
        adv, nonzero = group_relative_advantages(rewards, kind, cfg.std_ddof, hp.std_floor)
        seq_weight = jnp.ones_like(adv)
        if cfg.mask_zero_std:
            seq_weight = jnp.broadcast_to(nonzero[:, None], adv.shape).astype(jnp.float32)
        c, p = rollout.completion, rollout.prompts
        score = lambda q: policy.logprobs(
            policy.combine(shared.weights, q), p.tokens, p.pad, c.tokens, hp.temperature
        )[0]
        # With one pass over the batch (one epoch, one minibatch) pi_old is the policy the
        # loss differentiates: its log-probs are the loss's own, stop-gradiented (as TRL does
        # with num_iterations=1), and a forward pass is saved.
        one_pass = cfg.num_epochs == 1 and cfg.num_minibatches == 1
        old_logp = None if one_pass else jax.lax.stop_gradient(score(params))
        ref_logp = score(ref_params)
        seq_weight = seq_weight.reshape(-1)
        # every minibatch divides by its share of the whole batch's tokens (batch_token_mean)
        tokens = jnp.sum(seq_weight * c.mask.sum(axis=1)) / cfg.num_minibatches
        batch = LMBatch(
            p.tokens,
            c.tokens,
            c.mask,
            adv.reshape(-1),
            seq_weight,
            old_logp,
            jax.lax.stop_gradient(ref_logp),
            jnp.full(seq_weight.shape, tokens),
            p.pad,
        )
        metrics = {
            "grpo/zero_std_frac": 1.0 - nonzero.mean(),
            "grpo/adv_mean": adv.mean(),
            "grpo/adv_std": adv.std(),
            "grpo/adv_abs_max": jnp.abs(adv).max(),
        }
        if old_logp is not None:  # the sampler's log-probs against a full forward pass's
            gap = masked_mean(jnp.abs(old_logp - c.logprobs), c.mask)
            metrics["policy/sample_logprob_gap"] = gap
        return batch, metrics

    def adam_update(params, opt_state, batch: LMBatch, hp: LMHParams, key, shared=NO_SHARED):
        """mu epochs x minibatches of Adam steps on the GRPO loss."""
        opt_state = set_clipped_adam_hparams(opt_state, hp, hp.learning_rate)
        grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)

        def minibatch_step(carry, mb: LMBatch):
            params, opt_state = carry
            (loss, aux), grads = grad_fn(params, mb, hp, cfg, policy, shared.weights)
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

    if cfg.update in TRUST_REGION_UPDATES:
        update = make_natural_update(completion_logprobs, cfg, cfg.update)
    else:
        update = adam_update

    def update_metrics_of(params, batch: LMBatch, rollout: Rollout, hp, shared) -> dict:
        """How far the update moved the policy on the sampled tokens (k3 of KL(pi_old || pi_new)
        per token, mean and max) and the sampled KL to the reference before it."""
        c = rollout.completion
        moved = token_kl(completion_logprobs(params, batch, hp, shared), c.logprobs)
        to_ref = losses.kl_estimate(batch.ref_logprobs - c.logprobs, cfg.kl_estimator)
        return {
            "policy/update_kl_mean": masked_mean(moved, c.mask),
            "policy/update_kl_max": jnp.max(jnp.where(c.mask > 0, moved, 0.0)),
            "policy/kl_ref_sampled": masked_mean(to_ref, c.mask),
        }

    def iteration(state: LMGRPOState, hp: LMHParams, shared=NO_SHARED) -> tuple[LMGRPOState, dict]:
        """One GRPO iteration: collect -> make_batch -> update -> (reference refresh)."""
        key, k_collect, k_update = jax.random.split(state.key, 3)
        if cfg.kl_control == "adaptive":
            hp = hp.replace(kl_beta=state.kl_beta)
        rollout = collect(state.params, k_collect, hp, shared)
        batch, batch_metrics = make_batch(state.params, state.ref_params, rollout, hp, shared)
        params, opt_state, update_metrics = update(
            state.params, state.opt_state, batch, hp, k_update, shared
        )
        moved = update_metrics_of(params, batch, rollout, hp, shared)
        kl_beta = state.kl_beta
        if cfg.kl_control == "adaptive":  # Ziegler et al. 2019; the PPO paper's halve / double
            kl_beta = adapt_kl_beta(kl_beta, moved["policy/kl_ref_sampled"], hp.kl_target)
        step = state.step + 1
        ref_params = state.ref_params
        if cfg.ref_refresh_every > 0:
            refresh = step % cfg.ref_refresh_every == 0
            ref_params = jax.tree.map(lambda p, r: jnp.where(refresh, p, r), params, ref_params)
        c = rollout.completion
        ended = c.lengths < cfg.max_new_tokens
        ended = ended | jnp.isin(c.tokens[:, -1], jnp.asarray(policy.eos_ids))
        metrics = {
            "reward/mean": rollout.rewards.mean(),
            "accuracy/sample": rollout.exact.mean(),
            "completion/length_mean": c.lengths.mean(),
            "completion/length_max": c.lengths.max(),
            "completion/eos_frac": ended.mean(),
            **batch_metrics,
            **update_metrics,
            **moved,
            "grpo/kl_beta": state.kl_beta,
        }
        metrics = {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
        return LMGRPOState(params, ref_params, opt_state, key, step, kl_beta), metrics

    def evaluate(params, prompts: Prompts, key: jax.Array, shared=NO_SHARED) -> dict:
        """Greedy completions of `prompts`: exact-match accuracy, mean length, the tokens."""
        variables = policy.combine(shared.weights, params)
        c = generate(variables, prompts, key, 1.0, greedy=True)
        _, exact = task.reward(shared.data, c.tokens, c.mask, prompts.target, LMHParams())
        return {"accuracy": exact.mean(), "length_mean": c.lengths.mean(), "tokens": c.tokens}

    return GRPO(init, iteration, evaluate, collect, make_batch, update, policy, task)
