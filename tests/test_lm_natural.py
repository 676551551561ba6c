"""TRPO and NPG steps of the language-model GRPO (`update: trpo | npg`, rlax_trpo/lm/natural.py)
on a tiny transformer: the Fisher-vector product against the explicit Fisher in float64, the
accepted step inside the region and improving the surrogate (both measured here, independently
of the library's own numbers), a rejected search leaving the parameters bit for bit, the
adaptive KL coefficient, and every update type as one jitted iteration."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rlax_trpo.config import config_from_dict as validate
from rlax_trpo.errors import ConfigError
from rlax_trpo.lm import tasks
from rlax_trpo.lm.grpo import make_grpo
from rlax_trpo.lm.model import ModelConfig, Transformer, init_params
from rlax_trpo.lm.natural import mean_token_kl
from rlax_trpo.lm.sampling import completion_logits, token_logprobs
from rlax_trpo.lm.types import LMHParams
from rlax_trpo.trust_region import fisher_vector_product

TASK = tasks.max_digit_task(3)
MCFG = ModelConfig(tasks.VOCAB_SIZE, TASK.prompt_len + 3, num_layers=1, d_model=16, num_heads=2)
SMALL = {"num_prompts": 4, "group_size": 4, "max_new_tokens": 3}
# partial credit: a random policy's rewards vary within groups, so the advantages are not 0
HP = LMHParams(kl_beta=0.0, partial_credit=0.5, max_kl=0.01)


def grpo_cfg(**fields):
    fields = {"algorithm": "grpo_lm", "task": "max_digit", "num_digits": 3, **SMALL, **fields}
    return validate(fields).grpo_cfg()


def rollout_batch(update: str, hp=HP, **fields):
    """A real batch: the tiny model's sampled completions, scored, advantages and all."""
    grpo = make_grpo(MCFG, TASK, grpo_cfg(update=update, **fields))
    params = init_params(Transformer(MCFG), jax.random.key(0))
    rollout = grpo.collect(params, jax.random.key(1), hp)
    batch, _ = grpo.make_batch(params, params, rollout, hp)
    return grpo, params, batch


def logp_fn(model_cfg, batch, temperature=1.0):
    apply = Transformer(model_cfg).apply
    return lambda p: token_logprobs(
        completion_logits(apply, p, batch.prompts, batch.tokens, batch.pad),
        batch.tokens,
        temperature,
    )[0]


def test_the_fisher_vector_product_is_the_explicit_fisher_in_float64():
    _, params, batch = rollout_batch("trpo")
    with jax.enable_x64(True):
        cfg64 = MCFG._replace(dtype="float64")
        p64 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
        logp_of = logp_fn(cfg64, batch)
        mask = jnp.asarray(batch.mask, jnp.float64)
        kl = mean_token_kl(logp_of, logp_of(p64), mask)
        # F = sum_t m_t g_t g_t^T / sum_t m_t with g_t = grad log pi(y_t): from the Jacobian
        flat, unravel = ravel_pytree(p64)
        jac = jax.jacrev(lambda f: logp_of(unravel(f)))(flat)  # [B, C, P]
        jac = jac.reshape(-1, flat.size) * jnp.sqrt(mask.reshape(-1, 1) / mask.sum())
        fisher = jac.T @ jac
        for seed in range(3):
            v = jax.random.normal(jax.random.key(seed), flat.shape, jnp.float64)
            fv = fisher_vector_product(kl, p64, unravel(v), 0.0)
            want = fisher @ v
            got = ravel_pytree(fv)[0]
            # within 1e-5 as asked; in float64 the two agree to ~1e-15
            assert float(jnp.abs(got - want).max()) < 1e-10 * float(jnp.abs(want).max())
        # the damped product adds d v
        fv = fisher_vector_product(kl, p64, unravel(v), 0.3)
        np.testing.assert_allclose(ravel_pytree(fv)[0], fisher @ v + 0.3 * v, atol=1e-9)


def _measured(batch, params, new_params):
    """The mean k3 KL(pi_old || pi_new) over the sampled tokens, and the change of the
    surrogate (the mean over sequences of the token mean of r A), computed here."""
    logp_of = logp_fn(MCFG, batch)
    old, new = logp_of(params), logp_of(new_params)
    m = batch.mask
    r = jnp.exp(new - old)
    kl = jnp.sum(m * (r - 1 - jnp.log(r))) / m.sum()
    per_seq = lambda x: jnp.mean(jnp.sum(m * x * batch.advantages[:, None], 1) / m.sum(1))
    return float(kl), float(per_seq(r) - per_seq(jnp.ones_like(r)))


@pytest.mark.parametrize("update", ["trpo", "npg"])
def test_the_step_stays_in_the_region_and_improves_the_surrogate(update):
    grpo, params, batch = rollout_batch(update)
    assert float(jnp.abs(batch.advantages).max()) > 0
    fn = jax.jit(lambda p, b: grpo.update(p, None, b, HP, jax.random.key(2)))
    new_params, _, metrics = fn(params, batch)
    kl, gain = _measured(batch, params, new_params)
    assert gain > 0, gain
    assert 0 < kl
    if update == "trpo":
        assert float(metrics["trpo/accepted"]) == 1.0
        assert kl <= float(HP.max_kl) * (1 + 1e-4), kl
    else:  # npg takes the step at the quadratic model's edge, unchecked
        assert float(metrics["trpo/quadratic_kl"]) == pytest.approx(float(HP.max_kl), rel=1e-3)
    assert float(metrics["trpo/cg_residual"]) < 0.1


def test_a_rejected_search_leaves_the_parameters_bit_for_bit():
    # one candidate (the full step) and a slack of 0: no step with any KL > 0 is accepted
    grpo, params, batch = rollout_batch("trpo", line_search_steps=1)
    hp = HP.replace(kl_slack=0.0)
    new_params, _, metrics = jax.jit(lambda p, b: grpo.update(p, None, b, hp, None))(params, batch)
    assert float(metrics["trpo/accepted"]) == 0.0
    assert float(metrics["trpo/expected_gain"]) > 0  # there was a step to reject
    same = jax.tree.map(
        lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), params, new_params
    )
    assert all(jax.tree.leaves(same))


@pytest.mark.parametrize(
    "fields",
    [
        {"update": "trpo"},
        {"update": "npg", "kl_control": "adaptive"},
        {"update": "adam", "loss_type": "dppo_tv", "num_epochs": 2, "num_minibatches": 2},
        {"update": "adam", "loss_type": "dppo_kl"},
    ],
    ids=lambda f: "-".join(map(str, f.values())),
)
def test_every_update_is_one_jitted_iteration(fields):
    grpo = make_grpo(MCFG, TASK, grpo_cfg(**fields))
    params = init_params(Transformer(MCFG), jax.random.key(0))
    state = grpo.init(jax.random.key(1), params, HP)
    step = jax.jit(grpo.iteration)
    for _ in range(2):
        state, metrics = step(state, HP)
    for name in ("policy/update_kl_mean", "policy/update_kl_max", "reward/mean"):
        assert np.isfinite(float(metrics[name])), name
    assert float(metrics["policy/update_kl_max"]) >= float(metrics["policy/update_kl_mean"]) > 0


def test_adaptive_kl_halves_below_and_doubles_above_the_target():
    grpo = make_grpo(MCFG, TASK, grpo_cfg(update="adam", kl_control="adaptive"))
    params = init_params(Transformer(MCFG), jax.random.key(0))
    hp = HP.replace(kl_beta=0.2, kl_target=0.05)
    state = grpo.init(jax.random.key(1), params, hp)
    # the reference is the policy itself: sampled KL 0 < target / 1.5, beta halves
    near, m = jax.jit(grpo.iteration)(state, hp)
    assert float(m["policy/kl_ref_sampled"]) < 1e-6
    assert float(near.kl_beta) == pytest.approx(0.1)
    # a reference far away (other weights): KL > 1.5 target, beta doubles
    far_ref = init_params(Transformer(MCFG), jax.random.key(7))
    far, m = jax.jit(grpo.iteration)(state.replace(ref_params=far_ref), hp)
    assert float(m["policy/kl_ref_sampled"]) > 1.5 * 0.05
    assert float(far.kl_beta) == pytest.approx(0.4)
    # fixed: hp.kl_beta throughout
    fixed = make_grpo(MCFG, TASK, grpo_cfg(update="adam"))
    s, _ = jax.jit(fixed.iteration)(fixed.init(jax.random.key(1), params, hp), hp)
    assert float(s.kl_beta) == pytest.approx(0.2)


@pytest.mark.parametrize(
    "fields, key",
    [
        ({"update": "trpo", "num_epochs": 2}, "num_epochs"),
        ({"update": "npg", "hp": {"learning_rate": 0.01}}, "hp.learning_rate"),
        ({"update": "trpo", "loss_type": "dapo"}, "loss_type"),
        ({"update": "npg", "line_search_steps": 4}, "line_search_steps"),
        ({"update": "adam", "hp": {"max_kl": 0.1}}, "hp.max_kl"),
        ({"update": "adam", "hp": {"kl_target": 0.1}}, "hp.kl_target"),
        ({"update": "sgd"}, "update"),
    ],
)
def test_settings_of_another_update_are_refused(fields, key):
    with pytest.raises(ConfigError, match=f"^{key}"):
        grpo_cfg(**fields)
