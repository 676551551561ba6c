"""The vine estimator (`rlax_trpo.algorithms.vine`, `sampling: vine`): branch estimates
against Q in closed form, common random numbers, the surrogate, the budget and vine TRPO
learning CartPole."""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.algorithms import vine
from rlax_trpo.config import Config, load_config
from rlax_trpo.envs.base import Env, EnvSpec, StepResult
from rlax_trpo.errors import ConfigError
from rlax_trpo.training import make_train, make_trainer

GAMMA = 0.9


def counter_env(noisy: bool = False) -> Env:
    """x' = x + 1 + 2a, reward 1 + a (plus uniform noise when `noisy`), terminated at x' >= 10,
    truncated at 8 steps; the state is (x, t), the observation [x]."""

    def reset(key):
        state = (jnp.float32(0.0), jnp.int32(0))
        return jnp.array([0.0]), state

    def step(key, state, action):
        x, t = state
        x, t = x + 1.0 + 2.0 * action, t + 1
        reward = 1.0 + action + (jax.random.uniform(key) if noisy else 0.0)
        terminated, truncated = x >= 10.0, (t >= 8) & (x < 10.0)
        done = terminated | truncated
        final_obs = jnp.array([x])
        state = (jnp.where(done, 0.0, x), jnp.where(done, 0, t))
        return StepResult(jnp.array([state[0]]), state, reward, terminated, truncated, final_obs)

    return Env(reset, step, EnvSpec((1,), True, 2), "counter")


def always_zero(obs):  # pi(a=0|s) = 1: after its first action every branch is known exactly
    logits = jnp.where(jnp.arange(2) == 0, 0.0, -1e9)
    return distrax.Categorical(logits=jnp.broadcast_to(logits, obs.shape[:-1] + (2,)))


def uniform(obs):
    return distrax.Categorical(logits=jnp.zeros(obs.shape[:-1] + (2,)))


def value(obs):
    return 100.0 + obs[..., 0]


def branches_of(env, policy, xs, ts, horizon, actions=None):
    key = jax.random.PRNGKey(0)
    states = (jnp.asarray(xs, jnp.float32), jnp.asarray(ts, jnp.int32))
    obs = states[0][:, None]
    if actions is None:
        actions, log_prob = vine.branch_actions(policy(obs), key, 2, every_action=True)
    else:
        actions, log_prob = jnp.asarray(actions), jnp.zeros(np.shape(actions))
    out = vine.branch_rollouts(env, policy, states, obs, actions, key, horizon)
    return vine.Branches(obs, actions, log_prob, *out)


def test_branch_values_are_q_in_closed_form():
    g, v = GAMMA, lambda x: 100.0 + x
    b = branches_of(counter_env(), always_zero, [0.0, 8.0, 0.0], [0, 0, 6], horizon=3)
    q = np.asarray(vine.branch_values(b, jnp.float32(g), value))
    expected = [
        # cut at the horizon: three rewards, then gamma^3 V(x_3)
        [1 + g + g**2 + g**3 * v(3.0), 2 + g + g**2 + g**3 * v(5.0)],
        # terminated (x reaches 10): no bootstrap
        [1 + g * 1, 2.0],
        # truncated at the 8th step of the episode: gamma^2 V(pre-reset x)
        [1 + g + g**2 * v(2.0), 2 + g + g**2 * v(4.0)],
    ]
    np.testing.assert_allclose(q, np.asarray(expected), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(b.boot_step), [[3, 3], [-1, -1], [2, 2]])
    # without the critic: the discounted rewards alone
    q_mc = np.asarray(vine.branch_values(b, jnp.float32(g), None))
    np.testing.assert_allclose(q_mc[0], [1 + g + g**2, 2 + g + g**2], rtol=1e-6)


def test_branches_of_a_state_share_their_random_numbers():
    # Same first action twice, a stochastic policy and noisy rewards: with common random
    # numbers the two branches of a state are the same trajectory; two copies of one state
    # in the rollout set use independent numbers.
    actions = [[1, 1], [1, 1]]
    b = branches_of(counter_env(noisy=True), uniform, [0.0, 0.0], [0, 0], 6, actions=actions)
    rewards = np.asarray(b.reward)
    np.testing.assert_array_equal(rewards[:, 0], rewards[:, 1])
    assert not np.allclose(rewards[0], rewards[1])


def test_every_action_surrogate_is_the_expected_advantage():
    # L(theta) = mean_n sum_k pi_theta(a_k|s_n) (Q_k - sum_j pi_old(a_j|s_n) Q_j): zero at
    # theta_old, and its gradient is that of sum_k pi_theta Q_k.
    q = jnp.array([[1.0, 3.0], [2.0, -2.0]])
    policy = lambda logits, obs: distrax.Categorical(logits=jnp.broadcast_to(logits, (2, 2)))
    old = jnp.array([0.2, -0.1])
    pi_old = jax.nn.softmax(old)
    b = vine.Branches(
        jnp.zeros((2, 1)), jnp.array([[0, 1], [0, 1]]), jnp.log(jnp.stack([pi_old] * 2)),
        None, None, None,
    )  # fmt: skip
    surrogate = vine.vine_surrogate_fn(policy, b, q, every_action=True)
    np.testing.assert_allclose(surrogate(old), 0.0, atol=1e-6)
    direct = lambda logits: (jax.nn.softmax(logits) * q).sum(1).mean()
    np.testing.assert_allclose(jax.grad(surrogate)(old), jax.grad(direct)(old), atol=1e-6)


def test_sampled_surrogate_is_self_normalised_importance_sampling():
    q = jnp.array([[1.0, 3.0, 2.0]])
    actions = jnp.array([[0.1, -0.4, 0.3]])[..., None]
    policy = lambda mean, obs: distrax.MultivariateNormalDiag(mean[None, None], jnp.ones((1, 1)))
    old = jnp.float32(0.0)
    old_lp = jax.vmap(policy(old, None).log_prob, in_axes=1, out_axes=1)(actions)
    b = vine.Branches(jnp.zeros((1, 1)), actions, old_lp, None, None, None)
    surrogate = vine.vine_surrogate_fn(policy, b, q, every_action=False)
    new = jnp.float32(0.3)
    a = np.asarray(actions[0, :, 0])
    w = np.exp(-0.5 * (a - 0.3) ** 2 + 0.5 * a**2)  # pi_new / pi_old of each sample
    np.testing.assert_allclose(surrogate(new), (w * q[0]).sum() / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(surrogate(old), q.mean(), rtol=1e-6)


def test_the_branches_count_in_the_budget_and_bad_settings_are_refused():
    config = Config.create(
        algorithm="trpo", sampling="vine", num_envs=2, num_steps=64, vine_states=16,
        vine_horizon=8, total_env_steps=10_000,
    )  # fmt: skip
    trainer = make_trainer(config)
    assert trainer.steps_per_iteration == 128 + 16 * 2 * 8  # CartPole: every one of 2 actions
    assert trainer.num_iterations == 10_000 // 384
    with pytest.raises(ConfigError, match="vine_states"):
        make_train(config.replace(vine_states=129))
    with pytest.raises(ConfigError, match="continuous"):
        make_train(Config.create(algorithm="trpo", sampling="vine", env="Pendulum-v1"))
    with pytest.raises(ConfigError, match="memory"):
        make_train(config.replace(memory="gru"))
    with pytest.raises(ConfigError, match="vine_horizon: read only with sampling: vine"):
        Config.create(algorithm="trpo", vine_horizon=8)  # not silently ignored
    single = Config.create(algorithm="trpo")  # a saved config holds the defaults: it reloads
    assert Config.create(**single.to_dict()).to_dict() == single.to_dict()


def test_the_vine_anneals_its_ent_coef_too():
    # anneal_ent_coef in the vine's update: iteration 0 takes the full coefficient (the same
    # step as without annealing), iteration 1 two thirds of it (a different step).
    base = dict(algorithm="trpo", sampling="vine", num_envs=2, num_steps=64, vine_states=16,
                vine_horizon=8, total_env_steps=3 * 384, hidden_sizes=[16], value_epochs=1,
                value_minibatches=2, hp={"ent_coef": 0.5, "max_kl": 0.01})  # fmt: skip
    gains = {}
    for anneal in (False, True):
        config = Config.create(**base, anneal_ent_coef=anneal)
        _, metrics = jax.jit(make_train(config))(jax.random.key(0), config.hp)
        gains[anneal] = np.asarray(metrics["trpo/expected_improvement"])
    assert gains[True].shape == (3,)
    np.testing.assert_allclose(gains[True][0], gains[False][0], rtol=1e-5)
    assert abs(gains[True][1] - gains[False][1]) > 1e-3 * abs(gains[False][1]), gains


@pytest.mark.slow
def test_vine_trpo_learns_cartpole():
    config = load_config(
        "trpo_cartpole",
        ["sampling=vine", "vine_states=32", "vine_horizon=16", "total_env_steps=40960"],
    )
    _, metrics = jax.jit(make_train(config))(jax.random.PRNGKey(0), config.hp)
    returns = np.asarray(metrics["episode/return"])
    assert returns[-1] > 150, returns  # random play: about 22
