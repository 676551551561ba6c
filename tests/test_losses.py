"""Losses against rlax's published values and closed forms."""

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import losses

LOGITS = jnp.array([[1.0, 1, 1], [2, 0, 0], [-1, -2, -3]])
OLD_LOGITS = jnp.array([[1.0, 1, 1], [2, 0, 0], [-3, -2, -1]])
ACTIONS = jnp.array([0, 1, 2])


def _ratios():
    new = distrax.Categorical(logits=LOGITS).log_prob(ACTIONS)
    old = distrax.Categorical(logits=OLD_LOGITS).log_prob(ACTIONS)
    return jnp.exp(new - old)


@pytest.mark.parametrize("jit", [False, True])
def test_clipped_surrogate_matches_rlax_values(jit):
    ratios = _ratios()
    np.testing.assert_allclose(ratios, [1, 1, 0.135335], atol=1e-5)
    f = jax.jit(losses.clipped_surrogate_loss) if jit else losses.clipped_surrogate_loss
    adv = jnp.array([0.3, 0.2, 0.1])
    np.testing.assert_allclose(f(ratios, adv, 0.2), -0.17118, atol=1e-5)
    np.testing.assert_allclose(f(ratios, -adv, 0.2), 0.193333, atol=1e-5)


def test_clipped_surrogate_gradient_is_zero_where_clipped():
    adv = jnp.array([1.0, -1.0, 1.0, -1.0])
    grad = jax.grad(lambda r: losses.clipped_surrogate_loss(r, adv, 0.2) * 4)(
        jnp.array([1.5, 0.5, 0.9, 1.1])
    )
    # r > 1+eps with A > 0 and r < 1-eps with A < 0 are clipped; the others are not.
    np.testing.assert_allclose(grad, [0.0, 0.0, -1.0, 1.0])
    low, high = losses.clip_fractions(jnp.array([1.5, 0.5, 0.9, 1.1]), adv, 0.2)
    assert float(low) == 0.25 and float(high) == 0.25


def test_kl_estimators():
    p = distrax.Categorical(logits=jnp.array([0.3, -1.0, 2.0]))
    q = distrax.Categorical(logits=jnp.array([0.0, 0.5, 1.0]))
    exact = float(q.kl_divergence(p))  # KL(q || p)
    x = q.sample(seed=jax.random.key(0), sample_shape=200_000)
    log_ratio = p.log_prob(x) - q.log_prob(x)
    k1 = losses.kl_estimate(log_ratio, "k1")
    k3 = losses.kl_estimate(log_ratio, "k3")
    assert float(k3.min()) >= 0.0
    assert float(losses.kl_estimate(log_ratio, "k2").min()) >= 0.0
    np.testing.assert_allclose(float(k1.mean()), exact, rtol=0.03)
    np.testing.assert_allclose(float(k3.mean()), exact, rtol=0.03)
    with pytest.raises(ValueError, match="k1, k2 or k3"):
        losses.kl_estimate(log_ratio, "k4")


def test_value_loss_clipping():
    v, old, target = jnp.array([2.0]), jnp.array([0.0]), jnp.array([3.0])
    assert float(losses.value_loss(v, target)) == pytest.approx(0.5)
    # the clipped prediction 0.2 is further from the target: the max keeps it
    assert float(losses.value_loss(v, target, old, 0.2)) == pytest.approx(0.5 * 2.8**2)


def test_masked_mean_and_normalize():
    x = jnp.array([1.0, 2.0, 100.0])
    mask = jnp.array([1.0, 1.0, 0.0])
    assert float(losses.masked_mean(x, mask)) == pytest.approx(1.5)
    z = losses.normalize(x, mask)
    np.testing.assert_allclose(z[:2], [-1.0, 1.0], atol=1e-5)
