"""DPPO's losses (`loss_type: dppo_tv | dppo_kl`) against verl 0.9.1's own functions, number
for number.

Both sides get the same random per-token log-probs (the differentiated leaf), old log-probs, an
advantage per sequence and ragged completion masks (B = 8, T = 6). verl's side calls
`compute_policy_loss_dppo_tv` / `compute_policy_loss_dppo_kl` from its registry
(`get_policy_loss_fn`), with an omegaconf config holding the thresholds (`clip_ratio_low`,
`clip_ratio_high`: DPPO's divergence thresholds), `clip_ratio_c` (the truncation cap) and no
global batch information (one device); ours is `rlax_trpo.lm.objectives.policy_loss` under
`jax.grad`, in float64 on both sides. Loss and gradient agree to 1e-6 for each aggregation both
libraries have (verl's token-mean, seq-mean-token-mean, seq-mean-token-sum and
seq-mean-token-sum-norm are our batch_token_mean, seq_mean_token_mean, seq_mean_token_sum and
constant), with thresholds that mask some tokens of both advantage signs and keep others
(asserted), and a cap below some ratios. verl installs without its dependencies in the
`compare` step of .ci/run, beside what its loss module imports.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from omegaconf import OmegaConf  # noqa: E402

from rlax_trpo.config import Config  # noqa: E402
from rlax_trpo.lm.objectives import policy_loss  # noqa: E402
from rlax_trpo.lm.types import LMBatch, LMHParams  # noqa: E402
from rlax_trpo.losses import divergence_mask  # noqa: E402

B, T = 8, 6
LENGTHS = np.array([6, 1, 3, 5, 2, 6, 4, 3])
LOW = {"dppo_tv": (0.08, 0.12), "dppo_kl": (0.02, 0.04)}  # (low, high)
CAP = 3.0
AGGREGATIONS = {  # verl's name -> ours
    "token-mean": "batch_token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "constant",
}


def make_data(seed: int = 0) -> dict:
    """Token probabilities in (0.05, 0.95) and old ones a noisy distance away, so that both
    thresholds and the cap are active somewhere; padding holds other values."""
    rng = np.random.default_rng(seed)
    mask = (np.arange(T)[None] < LENGTHS[:, None]).astype(np.float64)
    logp = np.log(rng.uniform(0.05, 0.95, (B, T)))
    old = np.minimum(logp + rng.normal(0.0, 0.5, (B, T)), -1e-3)
    return {"logp": logp, "old": old, "adv": rng.normal(0.0, 1.0, B), "mask": mask}


def verl_loss(loss_type: str, agg: str, data: dict) -> tuple[float, np.ndarray]:
    logp = torch.tensor(data["logp"], dtype=torch.float64, requires_grad=True)
    low, high = LOW[loss_type]
    config = OmegaConf.create(
        {
            "clip_ratio": 0.2,
            "clip_ratio_low": low,
            "clip_ratio_high": high,
            "clip_ratio_c": CAP,
            "global_batch_info": {},
        }
    )
    adv = torch.tensor(data["adv"], dtype=torch.float64)[:, None].expand(B, T)
    fn = core_algos.get_policy_loss_fn(loss_type)
    old = torch.tensor(data["old"], dtype=torch.float64)
    mask = torch.tensor(data["mask"], dtype=torch.float64)
    loss, _ = fn(old, logp, adv, mask, agg, config)
    loss.backward()
    return loss.item(), logp.grad.numpy()


def our_loss(loss_type: str, agg: str, data: dict) -> tuple[float, np.ndarray]:
    with jax.enable_x64(True):
        batch = LMBatch(
            prompts=jnp.zeros((B, 1), jnp.int32),
            tokens=jnp.zeros((B, T), jnp.int32),
            mask=jnp.asarray(data["mask"]),
            advantages=jnp.asarray(data["adv"]),
            seq_weight=jnp.ones(B),
            old_logprobs=jnp.asarray(data["old"]),
            ref_logprobs=jnp.asarray(data["logp"]),
        )
        low, high = LOW[loss_type]
        hp = LMHParams(kl_beta=0.0, dppo_ratio_cap=CAP)
        hp = hp.replace(**{f"{loss_type}_low": low, f"{loss_type}_high": high})
        cfg = Config.create(
            algorithm="grpo_lm", max_new_tokens=T, loss_type=loss_type, loss_agg=agg
        ).grpo_cfg()
        fn = jax.value_and_grad(lambda lp: policy_loss(lp, batch, hp, cfg)[0])
        loss, grad = fn(jnp.asarray(data["logp"]))
        return float(loss), np.asarray(grad)


@pytest.mark.parametrize("agg", AGGREGATIONS)
@pytest.mark.parametrize("loss_type", ["dppo_tv", "dppo_kl"])
def test_loss_and_gradient_match_verl(loss_type, agg):
    data = make_data()
    theirs, ours = verl_loss(loss_type, agg, data), our_loss(loss_type, AGGREGATIONS[agg], data)
    assert abs(theirs[0] - ours[0]) < 1e-6, (theirs[0], ours[0])
    np.testing.assert_allclose(ours[1], theirs[1], atol=1e-6)
    # the case can fail: some tokens of each sign masked, some kept, some ratios above the cap
    with jax.enable_x64(True):
        adv = np.broadcast_to(data["adv"][:, None], (B, T))
        kept = np.asarray(
            divergence_mask(
                jnp.asarray(data["logp"]), jnp.asarray(data["old"]), jnp.asarray(adv),
                *LOW[loss_type], loss_type.removeprefix("dppo_"),
            )
        )  # fmt: skip
    on = data["mask"] > 0
    for sign in (adv > 0, adv <= 0):
        assert 0 < kept[on & sign].sum() < (on & sign).sum()
    assert (np.exp(data["logp"] - data["old"])[on] > CAP).any()
    assert (theirs[1][on] == 0).any() and (theirs[1][on] != 0).any()
