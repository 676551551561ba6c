"""The records of the language-model GRPO, below every other `rlax_trpo.lm` module.

`LMHParams` (the `hp:` section), `LMGRPOConfig` (the static settings, a view of a validated
`grpo_lm` configuration), `LMBatch` (what the loss reads), `LMGRPOState` (the scan carry), and
the two records `make_grpo` is built from: `LMPolicy` (a language model as pure functions: the
tiny model or a Hugging Face decoder) and `LMTask` (prompts and a verifiable reward), with
`Prompts` and `LMShared` (the arrays every member reads: frozen weights and the task's data).
The control GRPO's records are others (`rlax_trpo.types.Batch`,
`rlax_trpo.algorithms.grpo.GRPOState`): hence the `LM` in these names.
"""

from __future__ import annotations

from collections.abc import Callable
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
    dppo_tv_low: Any = hp_field(0.15, ge=0)  # DPPO thresholds (verl's example defaults)
    dppo_tv_high: Any = hp_field(0.15, ge=0)
    dppo_kl_low: Any = hp_field(0.05, ge=0)
    dppo_kl_high: Any = hp_field(0.05, ge=0)
    dppo_ratio_cap: Any = hp_field(20.0, gt=0)  # truncated importance weight (verl's clip_ratio_c)
    kl_target: Any = hp_field(0.01, gt=0)  # kl_control adaptive: the KL to pi_ref it keeps
    max_kl: Any = hp_field(0.01, gt=0)  # trpo / npg: delta, 1/2 s^T F s = max_kl
    cg_damping: Any = hp_field(0.01, ge=0)
    cg_tol: Any = hp_field(1e-5, ge=0)
    line_search_decay: Any = hp_field(0.5, gt=0, lt=1)
    kl_slack: Any = hp_field(1.0, ge=1)  # trpo accepts a measured KL <= kl_slack * max_kl
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
      update: "adam" (epochs x minibatches of Adam on the loss type's loss), "trpo" or "npg"
        (one natural-gradient step on the batch, `rlax_trpo.lm.natural`).
      cg_iters: trpo / npg: at most this many conjugate-gradient iterations.
      line_search_steps: trpo: candidate step fractions hp.line_search_decay^j, j < this.
      kl_control: "fixed" (hp.kl_beta throughout) or "adaptive" (the PPO paper's rule on the
        sampled KL to the reference, hp.kl_target; Ziegler et al. 2019 adapt it likewise).
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
    update: str
    cg_iters: int
    line_search_steps: int
    kl_control: str


class LMBatch(NamedTuple):
    """What the loss needs, per sequence `[B]` or per token `[B, C]`."""

    prompts: jax.Array  # [B, P]
    tokens: jax.Array  # [B, C]
    mask: jax.Array  # [B, C] 1 on generated tokens
    advantages: jax.Array  # [B] one advantage for every token of a sequence
    seq_weight: jax.Array  # [B] 0 for sequences dropped by zero-variance masking, else 1
    # [B, C] pi_old, recomputed by a full forward pass; None: the loss's own log-probs,
    # stop-gradiented (one pass over the batch, where pi_old is the policy being updated)
    old_logprobs: jax.Array | None
    ref_logprobs: jax.Array  # [B, C] pi_ref
    # [B] the whole batch's (weighted) completion-token count / num_minibatches, the same for
    # every sequence: the normaliser of "batch_token_mean" (None: this batch's own count)
    token_norm: jax.Array | None = None
    pad: jax.Array | None = None  # [B] left-padding slots of each prompt (None: none)


@flax.struct.dataclass
class LMGRPOState:
    """Scan carry of the GRPO loop."""

    params: dict
    ref_params: dict
    opt_state: optax.OptState
    key: jax.Array
    step: jax.Array
    kl_beta: jax.Array  # the KL penalty's coefficient (hp.kl_beta, or adapted: kl_control)


class Prompts(NamedTuple):
    """A batch of prompts, left-padded to one length, and what their rewards are checked
    against."""

    tokens: jax.Array  # [n, P] int32; row b's first pad[b] tokens are padding
    pad: jax.Array  # [n] int32
    target: Any  # the task's answer record, [n, ...] leaves


class LMShared(NamedTuple):
    """What every member of a population reads and none changes, passed to the compiled
    program once rather than copied per member: the frozen base weights (a LoRA run's
    pretrained model; None when every parameter trains) and the task's arrays (a tokenised
    prompt bank, the digit table of its reward; None for generated tasks)."""

    weights: Any = None
    data: Any = None


class LMPolicy(NamedTuple):
    """A language model as the GRPO iteration uses it, as pure functions.

    Attributes:
      combine: `(weights, params) -> variables`, the frozen weights and the trained
        parameters as one tree for `apply`.
      apply: `(variables, tokens [B, S], start, cache, pad) -> (logits [B, S, V], cache)`.
      logprobs: `(variables, prompts [B, P], pad [B], completions [B, C], temperature) ->
        (logprobs, entropy)`, `[B, C]` each, by a full forward pass.
      init_cache: `(batch, length) -> KVCache`, an empty cache.
      eos_ids: the token ids that end a completion.
      pad_id: the id written after a completion's end.
      max_len: the longest prompt + completion the model takes.
    """

    combine: Callable[[Any, Any], Any]
    apply: Callable[..., Any]
    logprobs: Callable[..., tuple[jax.Array, jax.Array]]
    init_cache: Callable[[int, int], Any]
    eos_ids: tuple[int, ...]
    pad_id: int
    max_len: int


class LMTask(NamedTuple):
    """Prompts with a verifiable reward.

    Attributes:
      name: the task's name.
      prompt_len: P, the (padded) length of every prompt.
      sample: `(data, key, n) -> Prompts` from the training split (traced).
      reward: `(data, tokens [n, C], mask [n, C], target, hp) -> (reward [n], exact [n])`,
        `exact` the answer being right (what accuracy counts).
      eval_prompts: `(data, n) -> Prompts`, the first n held-out prompts (host side).
      data: the task's arrays (host numpy; `LMShared.data` on the device), or None.
    """

    name: str
    prompt_len: int
    sample: Callable[..., Prompts]
    reward: Callable[..., tuple[jax.Array, jax.Array]]
    eval_prompts: Callable[[Any, int], Prompts]
    data: Any = None
