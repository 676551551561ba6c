"""Advantage estimators against closed forms, rlax's published values and plain loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import advantages as adv

# rlax's GAE test data (`TruncatedGeneralizedAdvantageEstimationTest` in rlax's
# rlax/_src/multistep_test.py): two sequences, T = 5, T + 1 values.
R = np.array([[0, 0, 1, 0, -0.5], [0, 0, 0, 0, 1]], np.float32)
V = np.array([[1, 4, -3, -2, -1, -1], [-3, -2, -1, 0, 5, -1]], np.float32)
D = np.array([[0.99] * 5, [0.9, 0.9, 0.9, 0.0, 0.9]], np.float32)
EXPECTED = {
    1.0: [[-1.45119, -4.45575, 2.53965, 0.5249, -0.49], [3, 2, 1, 0, -4.9]],
    0.7: [[-0.67698, -5.24817, 2.48461, 0.67043, -0.49], [2.2899, 1.73, 1, 0, -4.9]],
    0.4: [[0.56732, -6.04212, 2.34312, 0.81596, -0.49], [1.7256, 1.46, 1, 0, -4.9]],
}


def rlax_style_gae(lam, jit):
    def f(r, v, d):
        # time-major: [T, B]
        return adv.generalized_advantage_estimation(r.T, v[:, :-1].T, v[:, 1:].T, d.T, lam * d.T).T

    return (jax.jit(f) if jit else f)(R, V, D)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("lam", sorted(EXPECTED))
def test_gae_matches_rlax_values(lam, jit):
    np.testing.assert_allclose(rlax_style_gae(lam, jit), EXPECTED[lam], atol=1e-4)


def test_gae_lambda_zero_is_td_error():
    got = rlax_style_gae(0.0, True)
    np.testing.assert_allclose(got[0], [2.96, -6.97, 2.02, 1.01, -0.49], atol=1e-4)
    td = R + D * V[:, 1:] - V[:, :-1]
    np.testing.assert_allclose(got, td, atol=1e-5)


def _random_rollout(key, T=37, B=5):
    ks = jax.random.split(key, 5)
    rewards = jax.random.normal(ks[0], (T, B))
    values = jax.random.normal(ks[1], (T, B))
    terminated = jax.random.bernoulli(ks[3], 0.1, (T, B))
    truncated = jax.random.bernoulli(ks[4], 0.1, (T, B)) & ~terminated
    # As in a real rollout: within an episode V(final_obs[t]) = V(obs[t+1]); where an
    # episode ends (or at the rollout end) final_obs is a state the next step never sees.
    done = terminated | truncated
    fresh = jax.random.normal(ks[2], (T, B))
    following = jnp.concatenate([values[1:], fresh[-1:]], axis=0)
    next_values = jnp.where(done, fresh, following)
    return rewards, values, next_values, terminated, truncated


def _gae_loop(r, v, nv, term, trunc, gamma, lam):
    r, v, nv, term, trunc = map(np.asarray, (r, v, nv, term, trunc))
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        acc = 0.0
        for t in reversed(range(T)):
            done = term[t, b] or trunc[t, b]
            delta = r[t, b] + gamma * (1 - term[t, b]) * nv[t, b] - v[t, b]
            acc = delta + gamma * lam * (0.0 if done else 1.0) * acc
            out[t, b] = acc
    return out


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_gae_scan_equals_plain_loop(lam):
    batch = _random_rollout(jax.random.key(1))
    got = jax.jit(adv.gae_from_env, static_argnums=())(*batch, 0.97, lam)
    np.testing.assert_allclose(got, _gae_loop(*batch, 0.97, lam), rtol=1e-5, atol=1e-5)


def _mc_loop(r, v, nv, term, trunc, gamma):
    """Discounted return to the episode end; the unfinished tail bootstraps from V."""
    r, v, nv, term, trunc = map(np.asarray, (r, v, nv, term, trunc))
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            g, scale = 0.0, 1.0
            for k in range(t, T):
                g += scale * r[k, b]
                if term[k, b]:
                    break
                if trunc[k, b] or k == T - 1:
                    g += scale * gamma * nv[k, b]
                    break
                scale *= gamma
            out[t, b] = g - v[t, b]
    return out


def test_lambda_one_is_monte_carlo_return():
    batch = _random_rollout(jax.random.key(2))
    mc = adv.monte_carlo_from_env(*batch, 0.9)
    np.testing.assert_allclose(mc, _mc_loop(*batch, 0.9), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mc, adv.gae_from_env(*batch, 0.9, 1.0), atol=1e-6)


def _nstep_loop(r, v, nv, term, trunc, gamma, n):
    r, v, nv, term, trunc = map(np.asarray, (r, v, nv, term, trunc))
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            g, scale = 0.0, 1.0
            for k in range(t, min(t + n, T)):
                g += scale * r[k, b]
                if term[k, b]:
                    break
                if trunc[k, b] or k == T - 1 or k == t + n - 1:
                    g += scale * gamma * nv[k, b]
                    break
                scale *= gamma
            out[t, b] = g - v[t, b]
    return out


@pytest.mark.parametrize("n", [1, 3, 8])
def test_n_step_equals_plain_loop(n):
    batch = _random_rollout(jax.random.key(3))
    got = jax.jit(adv.n_step_from_env, static_argnums=(6,))(*batch, 0.95, n)
    np.testing.assert_allclose(got, _nstep_loop(*batch, 0.95, n), rtol=1e-5, atol=1e-5)


def test_n_step_limits():
    batch = _random_rollout(jax.random.key(4))
    n_step = jax.jit(adv.n_step_from_env, static_argnums=(6,))
    np.testing.assert_allclose(
        n_step(*batch, 0.9, 1), adv.gae_from_env(*batch, 0.9, 0.0), atol=1e-5
    )
    np.testing.assert_allclose(
        n_step(*batch, 0.9, 100), adv.monte_carlo_from_env(*batch, 0.9), atol=1e-4
    )


def test_truncation_bootstraps_termination_does_not():
    # One env, three steps; step 1 ends the episode. Reward 1, values 10, except that the
    # state after step 2 (a new episode) is worth 100, which must not leak into step 0.
    r = jnp.ones((3, 1))
    v = jnp.full((3, 1), 10.0)
    nv = jnp.array([[10.0], [10.0], [100.0]])
    end = jnp.array([[False], [True], [False]])
    no = jnp.zeros((3, 1), bool)
    as_trunc = adv.gae_from_env(r, v, nv, no, end, 0.9, 0.0)
    as_term = adv.gae_from_env(r, v, nv, end, no, 0.9, 0.0)
    np.testing.assert_allclose(as_trunc[1, 0], 1 + 0.9 * 10 - 10)  # bootstraps
    np.testing.assert_allclose(as_term[1, 0], 1 - 10)  # does not
    # Both cut the trace: step 0 does not see step 2 at lambda 1.
    full_trunc = adv.gae_from_env(r, v, nv, no, end, 0.9, 1.0)
    np.testing.assert_allclose(full_trunc[0, 0], 1 + 0.9 * (1 + 0.9 * 10) - 10, rtol=1e-6)


def test_group_relative_advantages():
    rewards = jnp.array([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0]])
    a, nonzero = adv.group_relative_advantages(rewards, "grpo")
    np.testing.assert_allclose(a.mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_array_equal(nonzero, [True, False, True])
    np.testing.assert_array_equal(a[1], 0.0)
    np.testing.assert_allclose(a[0], [1, -1, -1, 1], atol=1e-5)  # std with ddof 0 is 0.5
    rloo, _ = adv.group_relative_advantages(rewards, "rloo")
    # leave-one-out: r_i - mean of the others
    np.testing.assert_allclose(rloo[2, 0], 0.0 - (1 + 2 + 3) / 3, atol=1e-6)
    assert np.isfinite(np.asarray(a)).all()
