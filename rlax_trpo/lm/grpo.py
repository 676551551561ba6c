"""GRPO for question-answer language models: the whole iteration in one traceable function.

    prompts -> G completions each (KV-cache sampler) -> verifiable rewards
      -> group-relative advantages -> mu epochs x minibatches of the token-level clipped loss
      with a KL penalty to the reference policy -> (optional) reference refresh.

Shao et al. 2024 (DeepSeekMath), eq. 3 with outcome supervision; loss aggregation choices from
DAPO (Yu et al. 2025, token mean, decoupled clip) and Dr. GRPO (Liu et al. 2025, no std,
constant normaliser). `GRPOConfig.loss_type` chooses among the loss family of TRL 1.16 (grpo,
dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo; see `policy_loss`), `importance_sampling_level`
between token ratios and GSPO's sequence ratio (Zheng et al. 2025). The loss is a pure function
of per-token log-probs (`policy_loss`), checked number for number against TRL's own
`GRPOTrainer._compute_loss` in tests/test_lm_losses_trl.py. Library code never jits: call sites
wrap `GRPO.iteration` in `jax.jit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import optax

from rlax_trpo.advantages import group_relative_advantages
from rlax_trpo.algorithms.common import epochs_of_minibatches, minibatches
from rlax_trpo.fields import HParams, hp_field
from rlax_trpo.lm.model import ModelConfig, Transformer
from rlax_trpo.lm.objectives import (  # noqa: F401  (public here too)
    CLIP_LOSS_TYPES,
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    LOSS_TYPES,
    aggregate_loss,
    importance_ratio,
    policy_loss,
)
from rlax_trpo.lm.sampling import Completion, completion_logits, sample, token_logprobs
from rlax_trpo.lm.tasks import EOS, Task, sample_train, score
from rlax_trpo.losses import masked_mean


class GRPOConfig(NamedTuple):
    """Static settings: everything that fixes shapes or loop lengths.

    Attributes:
      num_prompts: N prompts per iteration.
      group_size: G completions per prompt (batch B = N * G sequences).
      max_new_tokens: C, the completion budget.
      num_epochs: mu, passes over the batch per iteration.
      num_minibatches: minibatches per epoch (must divide B).
      loss_type: the per-token objective and its aggregation, one of `LOSS_TYPES` (`policy_loss`).
      importance_sampling_level: "token" (r_it), "sequence" (GSPO's s_i) or "sequence_token"
        (GSPO-token), see `importance_ratio`.
      kl_bias_correction: multiply the per-token KL by the importance ratio (TRL's
        `use_bias_correction_kl`, DeepSeek-V3.2), not stop-gradiented.
      loss_agg: None (the loss type's own aggregation, `LOSS_TYPES`) or one of
        `LOSS_AGGREGATIONS`, which overrides it (`aggregate_loss`).
      scale_rewards: divide the centred rewards by the group std (False: Dr. GRPO).
      std_ddof: 0 for the population std (EasyDeL, MaxText), 1 for n-1 (TRL, Tunix).
      mask_zero_std: drop groups whose rewards are all equal from the loss and its denominator.
      kl_estimator: "k1", "k2" or "k3" estimate of KL(pi_theta || pi_ref) per token.
      ref_refresh_every: copy the policy into the reference every K iterations (0: never).
    """

    num_prompts: int = 32
    group_size: int = 8
    max_new_tokens: int = 2
    num_epochs: int = 1
    num_minibatches: int = 1
    loss_type: str = "grpo"
    importance_sampling_level: str = "token"
    kl_bias_correction: bool = False
    loss_agg: str | None = None
    scale_rewards: bool = True
    std_ddof: int = 0
    mask_zero_std: bool = False
    kl_estimator: str = "k3"
    ref_refresh_every: int = 0


@flax.struct.dataclass
class LMHParams(HParams):
    """Traceable float hyperparameters (the YAML `hp:` section of a `grpo_lm` config); a
    pytree, so they can be vmapped. `rlax_trpo.lm.config` validates them with these bounds."""

    learning_rate: Any = hp_field(1e-3, gt=0)
    clip_eps_low: Any = hp_field(0.2, ge=0, lt=1)
    clip_eps_high: Any = hp_field(0.28, ge=0)
    kl_beta: Any = hp_field(0.04, ge=0)
    clip_delta: Any = hp_field(0.0, ge=0)  # two-sided clip: cap r at delta (0: off)
    sapo_temperature_pos: Any = hp_field(1.0, gt=0)
    sapo_temperature_neg: Any = hp_field(1.05, gt=0)
    vespo_k_pos: Any = hp_field(2.0, ge=0)
    vespo_lambda_pos: Any = hp_field(3.0, gt=0)
    vespo_k_neg: Any = hp_field(3.0, ge=0)
    vespo_lambda_neg: Any = hp_field(2.0, gt=0)
    temperature: Any = hp_field(1.0, gt=0)
    partial_credit: Any = hp_field(0.0, ge=0, le=1)
    max_grad_norm: Any = hp_field(1.0, gt=0)
    std_floor: Any = hp_field(1e-3, gt=0)
    adam_eps: Any = hp_field(1e-8, gt=0)
    warm_start_learning_rate: Any = hp_field(1e-3, gt=0)


class Rollout(NamedTuple):
    """`B = N * G` sampled sequences (group members adjacent) and their rewards."""

    prompts: jax.Array  # [B, P]
    targets: jax.Array  # [B, A + 1]
    completion: Completion  # [B, C] fields
    rewards: jax.Array  # [B]
    exact: jax.Array  # [B] bool


class Batch(NamedTuple):
    """What the loss needs, per sequence `[B]` or per token `[B, C]`."""

    prompts: jax.Array  # [B, P]
    tokens: jax.Array  # [B, C]
    mask: jax.Array  # [B, C] 1 on generated tokens
    advantages: jax.Array  # [B] one advantage for every token of a sequence
    seq_weight: jax.Array  # [B] 0 for sequences dropped by zero-variance masking, else 1
    old_logprobs: jax.Array  # [B, C] pi_old, recomputed by a full forward pass
    ref_logprobs: jax.Array  # [B, C] pi_ref
    # [B] the whole batch's (weighted) completion-token count / num_minibatches, the same for
    # every sequence: the normaliser of "batch_token_mean" (None: this batch's own count)
    token_norm: jax.Array | None = None


@flax.struct.dataclass
class GRPOState:
    """Scan carry of the GRPO loop."""

    params: dict
    ref_params: dict
    opt_state: optax.OptState
    key: jax.Array
    step: jax.Array


class GRPO(NamedTuple):
    """The algorithm as pure functions (call sites jit them)."""

    init: Callable[[jax.Array, dict, LMHParams], GRPOState]
    iteration: Callable[[GRPOState, LMHParams], tuple[GRPOState, dict]]
    evaluate: Callable[[dict, jax.Array, jax.Array, jax.Array], dict]
    # the pieces of `iteration`, exposed for benchmarks and notebooks
    collect: Callable[[dict, jax.Array, LMHParams], Rollout]
    make_batch: Callable[[dict, dict, Rollout, LMHParams], tuple[Batch, dict]]
    update: Callable[..., tuple]


# ----------------------------------------------------------------------------- algorithm


def make_optimizer() -> optax.GradientTransformation:
    """Adam after global-norm clipping, its hyperparameters injected (traceable, vmappable)."""

    def factory(learning_rate, max_grad_norm, adam_eps):
        return optax.chain(
            optax.clip_by_global_norm(max_grad_norm), optax.adam(learning_rate, eps=adam_eps)
        )

    return optax.inject_hyperparams(factory)(learning_rate=1e-3, max_grad_norm=1.0, adam_eps=1e-8)


def set_hyperparams(opt_state, **values):
    """Overwrite injected hyperparameters with the (traced) values of this call."""
    hyper = dict(opt_state.hyperparams)
    for name, value in values.items():
        hyper[name] = jnp.asarray(value, jnp.asarray(hyper[name]).dtype)
    return opt_state._replace(hyperparams=hyper)


def grpo_loss(
    params, batch: Batch, hp: LMHParams, cfg: GRPOConfig, apply_fn
) -> tuple[jax.Array, dict]:
    """`policy_loss` of the log-probs that `apply_fn(params)` gives the batch's completion
    tokens (at the sampling temperature)."""
    logits = completion_logits(apply_fn, params, batch.prompts, batch.tokens)
    logp, _ = token_logprobs(logits, batch.tokens, hp.temperature)
    return policy_loss(logp, batch, hp, cfg)


def make_grpo(model_config: ModelConfig, task: Task, cfg: GRPOConfig) -> GRPO:
    """Build the GRPO iteration for `task` with a `Transformer(model_config)` policy."""
    model = Transformer(model_config)
    apply_fn = model.apply
    optimizer = make_optimizer()
    batch_size = cfg.num_prompts * cfg.group_size
    if batch_size % cfg.num_minibatches:
        raise ValueError(f"num_prompts*group_size={batch_size} not divisible by num_minibatches")
    if cfg.max_new_tokens < task.answer_len + 1:
        raise ValueError(f"max_new_tokens must be >= {task.answer_len + 1} for {task.name}")
    for name, value, allowed in (
        ("loss_type", cfg.loss_type, tuple(LOSS_TYPES)),
        ("importance_sampling_level", cfg.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS),
        ("loss_agg", cfg.loss_agg, (None, *LOSS_AGGREGATIONS)),
        ("kl_estimator", cfg.kl_estimator, KL_ESTIMATORS),
    ):
        if value not in allowed:
            raise ValueError(f"{name}: {value!r} is not one of {allowed}")

    def init(key: jax.Array, params, hp: LMHParams) -> GRPOState:
        opt_state = set_hyperparams(
            optimizer.init(params),
            learning_rate=hp.learning_rate,
            max_grad_norm=hp.max_grad_norm,
            adam_eps=hp.adam_eps,
        )
        return GRPOState(params, params, opt_state, key, jnp.zeros((), jnp.int32))

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

    def make_batch(params, ref_params, rollout: Rollout, hp: LMHParams) -> tuple[Batch, dict]:
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
        batch = Batch(
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

    def update(params, opt_state, batch: Batch, hp: LMHParams, key) -> tuple:
        """mu epochs x minibatches of Adam steps on the GRPO loss."""
        opt_state = set_hyperparams(
            opt_state,
            learning_rate=hp.learning_rate,
            max_grad_norm=hp.max_grad_norm,
            adam_eps=hp.adam_eps,
        )
        grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)

        def minibatch_step(carry, mb: Batch):
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

    def iteration(state: GRPOState, hp: LMHParams) -> tuple[GRPOState, dict]:
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
        return GRPOState(params, ref_params, opt_state, key, step), metrics

    def evaluate(params, prompts: jax.Array, targets: jax.Array, key: jax.Array) -> dict:
        """Greedy completions of `prompts`: exact-match accuracy, mean length, the tokens."""
        c = sample(
            apply_fn, params, model_config, prompts, key, cfg.max_new_tokens, 1.0, greedy=True
        )
        _, exact = score(c.tokens, targets, 0.0)
        return {"accuracy": exact.mean(), "length_mean": c.lengths.mean(), "tokens": c.tokens}

    return GRPO(init, iteration, evaluate, collect, make_batch, update)
