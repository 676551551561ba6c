"""The records of the language-model GRPO, below every other `rlax_trpo.lm` module.

`LMHParams` (the `hp:` section), `LMGRPOConfig` (the static settings, a view of a validated
`grpo_lm` configuration), `LMBatch` (what the loss reads) and `LMGRPOState` (the scan carry).
The control GRPO's records are others (`rlax_trpo.types.Batch`,
`rlax_trpo.algorithms.grpo.GRPOState`): hence the `LM` in these names.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax
import optax

from rlax_trpo.config.fields import HParams, hp_field


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


class LMGRPOConfig(NamedTuple):
    """Static settings: everything that fixes shapes or loop lengths.

    A view of a validated `grpo_lm` configuration, built by its `grpo_cfg()`: the fields of
    `rlax_trpo.lm.config.GRPOLMFields` (their defaults and checks are declared there, and only
    there) and the completion budget the task leaves (`LMFields.completion_len`). It has no
    defaults of its own: build it from a configuration,

        Config.create(algorithm="grpo_lm", task="sort", group_size=4).grpo_cfg()

    Attributes:
      num_prompts: N prompts per iteration.
      group_size: G completions per prompt (batch B = N * G sequences).
      max_new_tokens: C, the completion budget.
      num_epochs: mu, passes over the batch per iteration.
      num_minibatches: minibatches per epoch (must divide B).
      loss_type: the per-token objective and its aggregation, one of `LOSS_TYPES`
        (`rlax_trpo.lm.objectives.policy_loss`).
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

    num_prompts: int
    group_size: int
    max_new_tokens: int
    num_epochs: int
    num_minibatches: int
    loss_type: str
    importance_sampling_level: str
    kl_bias_correction: bool
    loss_agg: str | None
    scale_rewards: bool
    std_ddof: int
    mask_zero_std: bool
    kl_estimator: str
    ref_refresh_every: int


class LMBatch(NamedTuple):
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
class LMGRPOState:
    """Scan carry of the GRPO loop."""

    params: dict
    ref_params: dict
    opt_state: optax.OptState
    key: jax.Array
    step: jax.Array
