"""The language-model GRPO loss family against TRL 1.16's own code, number for number.

Both sides get the same random per-token log-probs (the leaf that is differentiated), old and
reference log-probs, one advantage per sequence and a completion mask with ragged lengths
(B = 8 sequences, T = 6 tokens, some of length 1). TRL's side runs its real loss code,
`GRPOTrainer._compute_loss(fake_self, model, inputs)` called unbound, with a minimal `self`
whose `_get_per_token_logps_and_entropies` returns the torch leaf and whose other attributes are
the ones `_compute_loss` reads; our side is `rlax_trpo.lm.objectives.policy_loss` under `jax.grad`.
The loss and its gradient with respect to every per-token log-prob (padding included: zero on
both sides) agree to 1e-5 for every loss type, at the token and sequence importance-sampling
levels, with two-sided clipping (delta), with a KL penalty with and without the bias correction,
and with old != current log-probs, so that the clip (or CISPO's truncation, or delta's cap) is
active for some tokens and not for others (asserted, so that these cases can fail).

Both sides compute in float64 (torch float64, `jax.enable_x64`): the two implementations then
agree to ~1e-16, so the 1e-5 tolerance measures formula disagreements only, not float32 rounding
amplified by the exponentials (VESPO's weight is exp(lambda + k log w - lambda w)). TRL's SAPO
builds its temperatures with `torch.where(advantages > 0, tau_pos, tau_neg)` from Python floats,
which makes a tensor of torch's default dtype: with the default float32, tau = 0.9 is rounded
(0.89999998) and TRL's float64 loss moves by ~1e-8; the TRL call runs with torch's default dtype
set to float64, so that SAPO agrees to ~1e-16 like the others.

Mappings, where our parameters are not TRL's:
  * CISPO: the MiniMax-M1 paper (arXiv:2506.13585) truncates the ratio at 1 + eps_high; TRL
    1.16 clamps at its `epsilon_high` itself (`clamp(coef_1, max=epsilon_high)`, recommended
    5.0). We follow the paper, so TRL gets epsilon_high = 1 + our clip_eps_high.
  * dapo / cispo / vespo divide by the token count of the whole generation batch; a minibatch of
    ours divides by that count / num_minibatches (`LMBatch.token_norm`), which is TRL's normaliser
    with `steps_per_generation` = num_minibatches and one accumulation step (checked with two).
  * `delta` None (off) is our `clip_delta` 0; `beta` is `kl_beta` with the k3 estimator (TRL's
    only one); `use_bias_correction_kl` is `kl_bias_correction`.
Nothing could not be matched. `python tests/test_lm_losses_trl.py` prints the largest
differences of every case.
"""

from __future__ import annotations

import collections
import types
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402

from rlax_trpo.config import Config  # noqa: E402
from rlax_trpo.lm.objectives import policy_loss  # noqa: E402
from rlax_trpo.lm.types import LMBatch, LMHParams  # noqa: E402

B, T = 8, 6
LENGTHS = np.array([6, 1, 3, 5, 2, 6, 4, 3])
EPS_LOW, EPS_HIGH = 0.2, 0.28
# non-default SAPO / VESPO values, so that a parameter that does not reach the loss shows
SAPO = {"sapo_temperature_pos": 0.9, "sapo_temperature_neg": 1.3}
VESPO = {"vespo_k_pos": 1.5, "vespo_lambda_pos": 2.5, "vespo_k_neg": 2.5, "vespo_lambda_neg": 1.5}
TOL = 1e-5


def make_data(seed: int = 0, batch: int = B) -> dict:
    """Per-token log-probs with ragged masks; old and reference log-probs a noisy distance away
    (log-ratios N(0, 0.4) per token + N(0, 0.3) per sequence: many tokens and some sequences
    outside [0.8, 1.28]); padding holds other values."""
    rng = np.random.default_rng(seed)
    lengths = np.resize(LENGTHS, batch)
    mask = (np.arange(T)[None] < lengths[:, None]).astype(np.float64)
    logp = -rng.uniform(0.2, 3.0, (batch, T))
    return {
        "logp": logp,
        "old": logp + rng.normal(0.0, 0.4, (batch, T)) + rng.normal(0.0, 0.3, (batch, 1)),
        "ref": logp + rng.normal(0.0, 0.5, (batch, T)),
        "adv": rng.normal(0.0, 1.0, batch),
        "mask": mask,
    }


class Case(NamedTuple):
    """One comparison: TRL's loss_type, importance_sampling_level, beta,
    use_bias_correction_kl, delta (0: None) and steps_per_generation (our num_minibatches)."""

    loss_type: str
    level: str = "token"
    beta: float = 0.0
    bias_kl: bool = False
    delta: float = 0.0
    minibatches: int = 1

    def __str__(self):
        return "-".join(str(v) for v in self)


LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
CASES = (
    [Case(t) for t in LOSS_TYPES]
    + [Case(t, "sequence") for t in LOSS_TYPES]
    + [Case(t, "token", 0.0, False, 1.5) for t in ("grpo", "dapo", "luspo")]
    + [Case("grpo", "sequence", 0.0, False, 1.1)]
    + [
        Case(t, lvl, 0.3, bias)
        for t in LOSS_TYPES
        for lvl in ("token", "sequence")
        for bias in (False, True)
    ]  # fmt: skip
    + [Case(t, "token", 0.3, True, 0.0, 2) for t in ("dapo", "cispo", "vespo")]
)


# ------------------------------------------------------------------------------ TRL's side


def trl_loss(case: Case, data: dict, num_items: float | None = None) -> tuple:
    """TRL 1.16's `_compute_loss` on `data`: the loss, d loss / d per-token log-probs, and the
    metrics it logged."""
    logp = torch.tensor(data["logp"], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(data["mask"], dtype=torch.float64)
    n = mask.shape[0]
    args = types.SimpleNamespace(
        delta=case.delta or None,
        use_bias_correction_kl=case.bias_kl,
        steps_per_generation=case.minibatches,
        entropy_target=0.2,
        **SAPO,
        **VESPO,
    )
    accelerator = types.SimpleNamespace(
        num_processes=1,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction="sum": x,
        sync_gradients=True,
    )
    fake = types.SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        get_gamma_weights=GRPOTrainer.get_gamma_weights,
        get_off_policy_mask=GRPOTrainer.get_off_policy_mask,
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=case.level,
        loss_type=case.loss_type,
        beta=case.beta,
        epsilon_low=EPS_LOW,
        # CISPO: TRL's cap is epsilon_high itself, the paper's (and ours) 1 + eps_high
        epsilon_high=1.0 + EPS_HIGH if case.loss_type == "cispo" else EPS_HIGH,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        max_completion_length=T,
        current_gradient_accumulation_steps=1,
        model=types.SimpleNamespace(training=True),
        accelerator=accelerator,
        args=args,
        _entropy_bonus_enabled=False,
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
    )
    inputs = {
        "prompt_ids": torch.zeros((n, 1), dtype=torch.long),
        "prompt_mask": torch.ones((n, 1), dtype=torch.long),
        "completion_ids": torch.zeros((n, T), dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.tensor(data["adv"], dtype=torch.float64),
        "old_per_token_logps": torch.tensor(data["old"], dtype=torch.float64),
        "ref_per_token_logps": torch.tensor(data["ref"], dtype=torch.float64),
        "num_items_in_batch": torch.tensor(mask.sum().item() if num_items is None else num_items),
    }
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # TRL's torch.where(A > 0, tau_pos, tau_neg) (SAPO)
    try:
        loss = GRPOTrainer._compute_loss(fake, None, inputs)
    finally:
        torch.set_default_dtype(default_dtype)
    loss.backward()
    return loss.item(), logp.grad.numpy(), fake._metrics["train"]


# ------------------------------------------------------------------------------ our side


def our_loss(case: Case, data: dict, token_norm: float | None = None):
    """`policy_loss` on `data` in float64: the loss, its gradient and its metrics."""
    with jax.enable_x64(True):
        n = data["mask"].shape[0]
        batch = LMBatch(
            prompts=jnp.zeros((n, 1), jnp.int32),
            tokens=jnp.zeros((n, T), jnp.int32),
            mask=jnp.asarray(data["mask"]),
            advantages=jnp.asarray(data["adv"]),
            seq_weight=jnp.ones(n),
            old_logprobs=jnp.asarray(data["old"]),
            ref_logprobs=jnp.asarray(data["ref"]),
            token_norm=None if token_norm is None else jnp.full(n, token_norm),
        )
        hp = LMHParams(
            clip_eps_low=EPS_LOW,
            clip_eps_high=EPS_HIGH,
            kl_beta=case.beta,
            clip_delta=case.delta,
            **SAPO,
            **VESPO,
        )
        cfg = Config.create(
            algorithm="grpo_lm",
            max_new_tokens=T,
            loss_type=case.loss_type,
            importance_sampling_level=case.level,
            kl_bias_correction=case.bias_kl,
            kl_estimator="k3",
        ).grpo_cfg()
        fn = jax.jit(jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, cfg), has_aux=True))
        (loss, aux), grad = fn(jnp.asarray(data["logp"]))
        return float(loss), np.asarray(grad), {k: float(v) for k, v in aux.items()}


def compare(case: Case) -> tuple:
    """|loss difference|, max |gradient difference|, both sides' metrics, the data. With two
    minibatches, the loss of the first half of a batch twice as large, normalised by the whole
    batch's tokens / 2 (ours) and TRL's num_items_in_batch / steps_per_generation."""
    if case.minibatches == 1:
        data = make_data()
        trl, ours = trl_loss(case, data), our_loss(case, data)
    else:
        whole = make_data(1, B * case.minibatches)
        total = whole["mask"].sum()
        data = {k: v[:B] for k, v in whole.items()}
        trl = trl_loss(case, data, num_items=total)
        ours = our_loss(case, data, token_norm=total / case.minibatches)
    return abs(trl[0] - ours[0]), float(np.abs(trl[1] - ours[1]).max()), trl[2], ours[2], data


def _clip_active(case: Case, data: dict) -> np.ndarray:
    """Tokens where the case's clip (or truncation, or cap) is active, by its own definition."""
    log_ratio = (data["logp"] - data["old"]) * data["mask"]
    if case.level == "sequence":
        log_ratio = np.broadcast_to(
            (log_ratio.sum(1) / data["mask"].sum(1))[:, None], log_ratio.shape
        )
    r, adv = np.exp(log_ratio), np.broadcast_to(data["adv"][:, None], log_ratio.shape)
    if case.loss_type == "cispo":
        active = r > 1 + EPS_HIGH
    elif case.delta:
        active = (r > case.delta) & (adv < 0)
    else:
        active = ((r > 1 + EPS_HIGH) & (adv > 0)) | ((r < 1 - EPS_LOW) & (adv < 0))
    return active[data["mask"] > 0]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_loss_and_gradient_match_trl(case):
    loss_diff, grad_diff, trl_metrics, our_metrics, data = compare(case)
    assert loss_diff < TOL and grad_diff < TOL, (loss_diff, grad_diff)
    if case.loss_type in ("grpo", "dr_grpo", "dapo", "bnpo", "luspo", "cispo"):
        active = _clip_active(case, data)
        assert active.any() and not active.all(), "the clip must be active for some tokens only"
    if case.level == "token" and "clip_ratio/low_mean" in trl_metrics:
        for ours, theirs in (("low", "low_mean"), ("high", "high_mean")):
            got = our_metrics[f"grpo/clip_frac_{ours}"]
            assert got == pytest.approx(trl_metrics[f"clip_ratio/{theirs}"][0], abs=1e-12)
    if case.beta and not case.bias_kl:
        assert our_metrics["policy/kl_ref"] == pytest.approx(trl_metrics["kl"][0], rel=1e-12)


def test_padding_gets_no_gradient_on_either_side():
    data = make_data()
    for case in (Case("grpo", "sequence", 0.3, True), Case("vespo", "token", 0.3, True)):
        _, trl_grad, _ = trl_loss(case, data)
        _, our_grad, _ = our_loss(case, data)
        pad = data["mask"] == 0
        assert np.all(trl_grad[pad] == 0) and np.all(our_grad[pad] == 0)
        assert np.all(our_grad[~pad] != 0)


def test_defaults_of_the_soft_losses_are_trls():
    import dataclasses

    from trl import GRPOConfig as TRLConfig

    theirs = {f.name: f.default for f in dataclasses.fields(TRLConfig)}
    ours = LMHParams()
    for name in (*SAPO, *VESPO):
        assert getattr(ours, name) == theirs[name], name
    assert ours.clip_eps_low == theirs["epsilon"]
    assert theirs["delta"] is None and ours.clip_delta == 0.0  # off


if __name__ == "__main__":
    for case in CASES:
        loss_diff, grad_diff, *_ = compare(case)
        print(f"{case!s:75s} |dloss| {loss_diff:.1e}  max|dgrad| {grad_diff:.1e}")
