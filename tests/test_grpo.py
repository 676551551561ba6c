"""GRPO unit tests: grouped rollouts, group-relative advantages, the update, KL estimators."""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import advantages as adv_lib
from rlax_trpo import losses
from rlax_trpo.algorithms.grouped import group_ids, grouped_reset, make_grouped_collect
from rlax_trpo.algorithms.grpo import make_grpo
from rlax_trpo.config import Config
from rlax_trpo.envs import make_env
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import make_networks
from rlax_trpo.rollout import EnvCarry
from rlax_trpo.types import EpisodeStats

# --- grouped rollouts ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["CartPole-v1", "Acrobot-v1", "MaxDigit-qa"])
def test_grouped_start_states_identical_within_and_distinct_across_groups(name):
    env = make_env(name)
    n, g = 5, 4
    obs, state = grouped_reset(env, jax.random.key(3), n, g)
    assert obs.shape[0] == n * g
    for leaf in [obs] + jax.tree.leaves(state):
        x = np.asarray(leaf).reshape((n, g, -1))
        np.testing.assert_array_equal(x, np.broadcast_to(x[:, :1], x.shape))
    # Different groups got different start states (states as a whole).
    flat = np.concatenate(
        [np.asarray(x, np.float64).reshape(n * g, -1) for x in jax.tree.leaves(state)], axis=1
    )[::g]
    assert len({tuple(row) for row in flat}) == n
    np.testing.assert_array_equal(group_ids(n, g), np.repeat(np.arange(n), g))


def test_grouped_collect_masks_after_first_episode_and_reports_first_episodes():
    config = Config.create(
        algorithm="grpo",
        env="CartPole-v1",
        num_envs=8,
        num_steps=120,
        group_size=4,
        num_minibatches=1,
        total_env_steps=960,
    )
    env = make_env(config.env)
    nets = make_networks(config, env.spec, with_value=False)
    params = nets.init(jax.random.key(0))
    obs, state = grouped_reset(env, jax.random.key(1), 2, 4)
    stats = EpisodeStats(jnp.zeros(8), jnp.zeros(8, jnp.int32))
    collect = make_grouped_collect(4)
    ro = jax.jit(
        lambda p, s, o, k: collect(env, lambda x: nets.policy(p, x), EnvCarry(s, o, stats), k, 120)
    )(params.policy, state, obs, jax.random.key(2))
    traj = ro.trajectory
    alive = np.asarray(adv_lib.first_episode_mask(traj.terminated, traj.truncated))
    done = np.asarray(ro.done)
    # At most one reported end per column, on its last alive step.
    assert (done.sum(0) <= 1).all()
    lengths = alive.sum(0)
    ended = done.any(0)
    np.testing.assert_array_equal(np.asarray(ro.finished_length).sum(0)[ended], lengths[ended])
    # CartPole pays 1 per step: the reported return is the first episode's length.
    np.testing.assert_allclose(np.asarray(ro.finished_return).sum(0)[ended], lengths[ended])
    # The first step of every column is alive, and alive is non-increasing in time.
    assert (alive[0] == 1).all() and (np.diff(alive, axis=0) <= 0).all()


# --- advantages ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("jit", [False, True])
def test_group_advantages_zero_mean_per_group(kind, jit):
    rewards = jax.random.normal(jax.random.key(0), (6, 8)) * 3.0 + 1.0
    fn = lambda r: adv_lib.group_relative_advantages(r, kind, 1, 1e-6)
    adv, nonzero = (jax.jit(fn) if jit else fn)(rewards)
    np.testing.assert_allclose(np.asarray(adv).mean(1), 0.0, atol=1e-5)
    assert np.asarray(nonzero).all()
    if kind == "grpo":  # unit sample std (ddof 1) within each group
        np.testing.assert_allclose(np.asarray(adv).std(1, ddof=1), 1.0, rtol=1e-4)
    if kind == "rloo":  # r_i - mean of the others, by hand
        r = np.asarray(rewards)
        loo = (r.sum(1, keepdims=True) - r) / 7
        np.testing.assert_allclose(np.asarray(adv), r - loo, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo"])
def test_equal_rewards_give_zero_advantage_and_no_nan(kind):
    rewards = jnp.array([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    adv, nonzero = adv_lib.group_relative_advantages(rewards, kind, 0, 1e-6)
    assert np.isfinite(np.asarray(adv)).all()
    np.testing.assert_array_equal(np.asarray(nonzero), [False, True, False])
    np.testing.assert_array_equal(np.asarray(adv)[[0, 2]], 0.0)


def test_group_normalisers():
    assert adv_lib.group_normalizer(16, "mean") == 16.0
    assert adv_lib.group_normalizer(64, "sqrt") == 8.0
    with pytest.raises(ValueError, match="unknown group normalizer"):
        adv_lib.group_normalizer(4, "max")


def test_first_episode_mask_and_returns_to_go_by_hand():
    term = jnp.array([[0, 0], [1, 0], [0, 0], [0, 1]], bool)
    trunc = jnp.zeros_like(term)
    mask = adv_lib.first_episode_mask(term, trunc)
    np.testing.assert_array_equal(mask, [[1, 1], [1, 1], [0, 1], [0, 1]])
    rewards = jnp.array([[1.0, 1.0], [2.0, 1.0], [4.0, 1.0], [8.0, 1.0]])
    rtg = adv_lib.discounted_returns_to_go(rewards, mask, 0.5)
    np.testing.assert_allclose(rtg, [[2.0, 1.875], [2.0, 1.75], [0.0, 1.5], [0.0, 1.0]])


def test_per_step_group_advantages_zero_mean_per_step_and_group():
    rtg = jax.random.uniform(jax.random.key(1), (5, 12))
    mask = jnp.ones_like(rtg)
    adv, nonzero = adv_lib.grouped_step_advantages(rtg, mask, 4, "grpo")
    np.testing.assert_allclose(np.asarray(adv).reshape(5, 3, 4).mean(-1), 0.0, atol=1e-5)
    assert nonzero.shape == (5, 3)


# --- KL estimators ------------------------------------------------------------------------


def test_k3_nonnegative_and_monte_carlo_mean_matches_exact_categorical_kl():
    q_logits = jnp.array([0.5, -1.0, 2.0, 0.0, 0.3])
    p_logits = jnp.array([-0.2, 0.4, 1.0, 0.8, -1.5])
    q, p = distrax.Categorical(logits=q_logits), distrax.Categorical(logits=p_logits)
    exact = float(q.kl_divergence(p))
    x = q.sample(seed=jax.random.key(0), sample_shape=(200_000,))
    log_ratio = p.log_prob(x) - q.log_prob(x)
    k3 = losses.kl_estimate(log_ratio, "k3")
    assert float(k3.min()) >= 0.0
    grid = jnp.linspace(-20, 20, 4001)
    assert float(losses.kl_estimate(grid, "k3").min()) >= 0.0
    for kind in ("k1", "k3"):  # the unbiased ones
        est = float(losses.kl_estimate(log_ratio, kind).mean())
        assert abs(est - exact) < 0.01 * max(exact, 0.1), (kind, est, exact)
    assert float(losses.kl_estimate(log_ratio, "k2").min()) >= 0.0


# --- the update ---------------------------------------------------------------------------


_TRAJECTORIES: dict = {}


def _setup(**overrides):
    fields = dict(
        algorithm="grpo",
        env="CartPole-v1",
        num_envs=12,
        num_steps=60,
        group_size=4,
        num_minibatches=1,
        num_epochs=1,
        total_env_steps=720,
        anneal_lr=False,
        hidden_sizes=[16],
    )
    fields.update(overrides)
    config = Config.create(**fields)
    env = make_env(config.env)
    nets = make_networks(config, env.spec, with_value=False)
    algo = make_grpo(config, nets)
    params = nets.init(jax.random.key(0))
    # Every test here rolls out the same initial policy: collect once, reuse the trajectory.
    layout = (config.num_envs, config.num_steps, config.group_size)
    if layout not in _TRAJECTORIES:
        obs, state = grouped_reset(
            env, jax.random.key(1), config.num_envs // config.group_size, config.group_size
        )
        stats = EpisodeStats(jnp.zeros(config.num_envs), jnp.zeros(config.num_envs, jnp.int32))
        policy = lambda x: nets.policy(params.policy, x)
        carry = EnvCarry(state, obs, stats)
        ro = algo.collect(env, policy, carry, jax.random.key(2), config.num_steps)
        _TRAJECTORIES[layout] = ro.trajectory
    return config, nets, algo, params, _TRAJECTORIES[layout]


def test_ratio_is_one_on_first_inner_epoch_and_metrics_present():
    config, nets, algo, params, traj = _setup(num_epochs=3, num_minibatches=3)
    hp = config.hp.replace(kl_beta=jnp.float32(0.04))
    batch = algo.make_batch(params, traj, hp)
    state = algo.init(params, hp)
    _, _, metrics = jax.jit(algo.update)(params, state, batch, hp, jax.random.key(5))
    assert float(metrics["grpo/first_ratio_dev"]) < 1e-5
    for key in (
        "grpo/zero_std_frac",
        "grpo/adv_mean",
        "grpo/adv_std",
        "grpo/clip_frac_low",
        "grpo/clip_frac_high",
        "policy/kl_ref",
        "policy/kl_old_new_k3",
        "policy/entropy",
    ):
        assert np.isfinite(float(metrics[key])), key
    assert "policy/kl" not in metrics  # KL to the reference is policy/kl_ref
    assert params.value is None


def test_mu1_beta0_gradient_equals_reinforce_with_group_mean_baseline():
    lr = 0.01
    config, nets, algo, params, traj = _setup(
        optimizer="sgd",
        group_advantage="dr_grpo",
        hp={"learning_rate": lr, "kl_beta": 0.0, "ent_coef": 0.0, "max_grad_norm": 1e9},
    )
    hp = config.hp
    batch = algo.make_batch(params, traj, hp)
    new, _, _ = algo.update(params, algo.init(params, hp), batch, hp, jax.random.key(5))

    # REINFORCE with the group-mean baseline, by hand.
    alive = adv_lib.first_episode_mask(traj.terminated, traj.truncated)
    r = (traj.reward * alive).sum(0).reshape(-1, 4)
    advantage = (r - r.mean(1, keepdims=True)).reshape(-1)
    informative = (r.std(1) > 0).sum()
    assert informative >= 2

    def reinforce_loss(policy):
        logp = nets.policy(policy, traj.obs).log_prob(traj.action)
        return -(alive * advantage[None] * logp).sum() / (traj.reward.shape[0] * 4 * informative)

    grad = jax.grad(reinforce_loss)(params.policy)
    expected = jax.tree.map(lambda p, gr: p - lr * gr, params.policy, grad)
    for a, b in zip(jax.tree.leaves(new.policy), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_zero_variance_groups_are_masked_and_counted():
    config, nets, algo, params, traj = _setup()
    # Make group 0 all equal: same rewards, nobody ends.
    reward = traj.reward.at[:, :4].set(1.0)
    term = traj.terminated.at[:, :4].set(False)
    trunc = traj.truncated.at[:, :4].set(False)
    traj = traj._replace(reward=reward, terminated=term, truncated=trunc)
    batch = algo.make_batch(params, traj, config.hp)
    assert float(batch.zero_std[0]) == 1.0
    np.testing.assert_array_equal(batch.mask[:, :4], 0.0)
    np.testing.assert_array_equal(batch.advantage[:, :4], 0.0)
    np.testing.assert_array_equal(batch.group_id[0], np.repeat(np.arange(3), 4))


def test_reference_policy_is_initial_until_refreshed_every_k():
    config, nets, algo, params, traj = _setup(ref_refresh_every=2, hp={"learning_rate": 1e-2})
    hp = config.hp
    state = algo.init(params, hp)
    update = jax.jit(algo.update)
    same_as_init = lambda ref: all(
        np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(ref), jax.tree.leaves(params.policy), strict=True)
    )
    p, history = params, []
    for i in range(3):  # updates 0, 1 keep pi_ref = pi_init; update 2 refreshes it
        batch = algo.make_batch(p, traj, hp)
        before = p.policy
        p, state, _ = update(p, state, batch, hp, jax.random.key(i))
        history.append(same_as_init(state.ref_policy))
    assert history == [True, True, False]
    # The refreshed reference is the policy at the start of update 2.
    for a, b in zip(jax.tree.leaves(state.ref_policy), jax.tree.leaves(before), strict=True):
        np.testing.assert_array_equal(a, b)


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="^num_envs:"):
        _setup(num_envs=10, total_env_steps=600)
    with pytest.raises(ConfigError, match="^num_minibatches:"):
        _setup(num_minibatches=2)


def test_cli_rejects_bad_grouping_with_one_line(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "train.py"
    spec = importlib.util.spec_from_file_location("train_cli", path)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    out = tmp_path / "run"
    argv = [
        "--out",
        str(out),
        "algorithm=grpo",
        "num_envs=10",
        "group_size=4",
        "num_minibatches=1",
        "num_steps=8",
    ]
    assert train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: num_envs:") and "\n" not in err
    assert not out.exists()


def test_group_loss_weights_by_hand():
    from rlax_trpo.algorithms.grpo import group_loss_weights

    mask = jnp.ones((3, 5, 4)).at[1].set(0.0)  # group 1 masked out (zero variance)
    w = group_loss_weights(mask, "mean")
    np.testing.assert_allclose(w[0], 1.0 / (5 * 4 * 2))
    np.testing.assert_array_equal(w[1], 0.0)
    np.testing.assert_allclose(float(w.sum()), 1.0, rtol=1e-6)
    w_sqrt = group_loss_weights(mask, "sqrt")
    np.testing.assert_allclose(w_sqrt / w.clip(1e-30) * (w > 0), 2.0 * (w > 0), rtol=1e-6)


def test_group_minibatches_keep_groups_whole():
    from rlax_trpo.algorithms.grpo import _Steps, group_minibatches

    t, n, g, m = 5, 6, 4, 3
    ids = jnp.broadcast_to(group_ids(n, g), (t, n * g))
    vals = jnp.arange(t * n * g, dtype=jnp.float32).reshape(t, n * g)
    steps = _Steps(vals[..., None], ids, vals, vals, vals, vals, vals, ids)
    mbs = group_minibatches(steps, jax.random.key(0), g, m)
    assert mbs.group_id.shape == (m, n // m, t, g)
    blocks = np.asarray(mbs.group_id).reshape(n, t * g)
    assert (blocks == blocks[:, :1]).all()  # one group per block, over all steps and members
    assert sorted(blocks[:, 0].tolist()) == list(range(n))  # every group exactly once
    # The data moved with its group id (column b = group * G + member).
    np.testing.assert_array_equal(np.asarray(mbs.log_prob) % (n * g) // g, np.asarray(mbs.group_id))


def test_kl_to_the_reference_pulls_the_policy_back():
    # With zero advantages only the KL term (ent_coef 0) moves the policy: not at all with
    # beta 0, and towards pi_ref with beta > 0.
    config, nets, algo, params, traj = _setup(
        optimizer="sgd", num_epochs=5, hp={"learning_rate": 0.5, "ent_coef": 0.0}
    )
    reference = nets.init(jax.random.key(9)).policy  # a different policy as pi_ref
    batch = algo.make_batch(params, traj, config.hp)
    batch = batch._replace(advantage=jnp.zeros_like(batch.advantage))

    def kl_to_ref(policy):
        new, ref = nets.policy(policy, traj.obs), nets.policy(reference, traj.obs)
        return float(new.kl_divergence(ref).mean())

    moved = {}
    for beta in (0.0, 1.0):
        hp = config.hp.replace(kl_beta=jnp.float32(beta))
        state = algo.init(params, hp)._replace(ref_policy=reference)
        new, _, _ = jax.jit(algo.update)(params, state, batch, hp, jax.random.key(5))
        moved[beta] = new.policy
    unchanged = jax.tree.map(lambda a, b: np.array_equal(a, b), moved[0.0], params.policy)
    assert all(jax.tree.leaves(unchanged))
    assert kl_to_ref(moved[1.0]) < 0.9 * kl_to_ref(params.policy)


def test_horizon_shorter_than_the_episode_limit_warns_once_before_tracing(capsys):
    from rlax_trpo.training import make_trainer

    base = dict(algorithm="grpo", num_envs=4, group_size=2, num_minibatches=1)
    make_trainer(Config.create(**base, env="Pendulum-v1", num_steps=1, total_env_steps=8))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: num_steps: the GRPO horizon (1 ")
    assert "Pendulum-v1's episode limit (200 steps)" in err and "num_steps=200" in err
    for env, steps in (("Pendulum-v1", 200), ("MaxDigit-qa", 1), ("CartPole-v1", 500)):
        make_trainer(Config.create(**base, env=env, num_steps=steps, total_env_steps=8 * steps))
        assert capsys.readouterr().err == "", env


def test_cli_warns_of_a_short_horizon_before_compiling(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = ["--config", "grpo_qa_bandit", "env=Pendulum-v1", "--out", str(tmp_path / "run"),
            "--no-progress", "num_envs=4", "group_size=2", "total_env_steps=16",
            "eval_episodes=1"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(root / "train.py"), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order written
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("warning: num_steps")]
    assert "episode limit (200 steps)" in line
    assert done.stdout.index(line) < done.stdout.index("compiling")
    assert "n/a (no finished episodes)" in done.stdout
