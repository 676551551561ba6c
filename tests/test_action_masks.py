"""Invalid-action masks: the masked categorical against closed forms over the legal set,
TRPO's Fisher-vector product against the explicit Fisher of the masked distribution, every
algorithm acting on a masked user environment, Jumanji's masks, and the bad inputs."""

from __future__ import annotations

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from masked_envs import register_masked_envs

import train
from rlax_trpo import Config, losses, make_env
from rlax_trpo import trust_region as tr
from rlax_trpo.algorithms import vine
from rlax_trpo.algorithms.common import BatchLayout
from rlax_trpo.algorithms.trpo import kl_fn, policy_bonus
from rlax_trpo.envs import EnvSpec, legal_actions
from rlax_trpo.errors import ConfigError
from rlax_trpo.networks import Categorical, MaskedCategorical, Networks, masked, policy_on
from rlax_trpo.rollout import EnvCarry, fresh_episodes, reset_envs
from rlax_trpo.types import Batch

register_masked_envs()


def random_masks(key, rows, k, one_legal_rows=0):
    """Masks `[rows, k]` with at least one legal action each; the first `one_legal_rows`
    rows have exactly one."""
    k_set, k_one, k_single = jax.random.split(key, 3)
    mask = jax.random.bernoulli(k_set, 0.5, (rows, k))
    mask = mask.at[jnp.arange(rows), jax.random.randint(k_one, (rows,), 0, k)].set(True)
    single = jax.nn.one_hot(jax.random.randint(k_single, (rows,), 0, k), k) > 0
    return jnp.where(jnp.arange(rows)[:, None] < one_legal_rows, single, mask)


def test_a_masked_policy_never_samples_nor_picks_an_illegal_action():
    rows, k = 64, 7
    logits = 3.0 * jax.random.normal(jax.random.key(0), (rows, k))
    mask = random_masks(jax.random.key(1), rows, k, one_legal_rows=8)
    # The illegal actions get the highest logits: unmasked, they would be the mode.
    logits = jnp.where(mask, logits, logits + 20.0)

    def draws(key, logit, legal):
        dist = masked(Categorical(logits=logit), legal)
        actions, log_prob = dist.sample_and_log_prob(seed=key, sample_shape=500)
        return actions, log_prob, dist.mode()

    keys = jax.random.split(jax.random.key(2), rows)
    actions, log_prob, mode = jax.jit(jax.vmap(draws))(keys, logits, mask)
    assert bool(jnp.take_along_axis(mask, actions, 1).all())
    assert bool(mask[jnp.arange(rows), mode].all())
    assert bool(jnp.isfinite(log_prob).all())
    # One legal action: always it, with log-probability 0.
    only = jnp.argmax(mask[:8], -1)
    assert bool((actions[:8] == only[:, None]).all())
    np.testing.assert_allclose(log_prob[:8], 0.0, atol=1e-6)
    # Many legal actions: more than one of them is drawn.
    assert int(jnp.unique(actions[8:].reshape(-1)).size) > 1


def _legal_softmax(logits, mask):
    z = np.where(mask, logits, -np.inf)
    z = z - z.max(-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(-1, keepdims=True)


def test_entropy_and_kl_of_the_masked_distribution_equal_closed_forms_over_the_legal_set():
    rows, k = 40, 6
    l1 = np.asarray(2.0 * jax.random.normal(jax.random.key(3), (rows, k)), np.float64)
    l2 = np.asarray(2.0 * jax.random.normal(jax.random.key(4), (rows, k)), np.float64)
    mask = np.asarray(random_masks(jax.random.key(5), rows, k, one_legal_rows=5))
    p, q = _legal_softmax(l1, mask), _legal_softmax(l2, mask)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(mask, p * np.log(p), 0.0).sum(-1)
        kl = np.where(mask, p * (np.log(p) - np.log(q)), 0.0).sum(-1)
    d1 = masked(Categorical(logits=jnp.asarray(l1, jnp.float32)), mask)
    d2 = masked(Categorical(logits=jnp.asarray(l2, jnp.float32)), mask)
    np.testing.assert_allclose(d1.entropy(), entropy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d1.kl_divergence(d2), kl, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(d1.entropy()[:5], 0.0, atol=1e-6)  # one legal action
    np.testing.assert_allclose(np.exp(d1.log_prob(jnp.arange(k)[:, None]).T), p, atol=1e-6)
    # Their derivatives are finite and do not reach the illegal logits (up to rounding: the
    # policy's logits come normalised over every action, a shift the masked softmax undoes).
    grad = jax.grad(lambda z: masked(Categorical(logits=z), mask).entropy().sum())
    g = np.asarray(grad(jnp.asarray(l1, jnp.float32)))
    assert np.isfinite(g).all() and np.abs(g[~mask]).max() < 1e-6 < np.abs(g[mask]).max()


def test_a_state_without_legal_actions_keeps_every_action():
    logits = jnp.array([[0.3, -1.0, 2.0], [0.3, -1.0, 2.0]])
    mask = jnp.array([[False, False, False], [True, False, True]])
    dist = masked(Categorical(logits=logits), mask)
    plain = Categorical(logits=logits)
    np.testing.assert_allclose(dist.entropy()[0], plain.entropy()[0], rtol=1e-6)
    assert float(dist.entropy()[1]) < float(plain.entropy()[1])
    assert bool(jnp.isfinite(dist.kl_divergence(masked(plain, mask))).all())


def test_the_log_barrier_is_over_the_legal_actions():
    logits = jnp.array([[0.0, 1.0, 2.0, 3.0]])
    mask = jnp.array([[True, False, True, True]])
    dist = masked(Categorical(logits=logits), mask)
    p = _legal_softmax(np.asarray(logits, np.float64), np.asarray(mask))[0, [0, 2, 3]]
    want = np.log(p).mean() + np.log(3)
    np.testing.assert_allclose(losses.log_barrier(dist.logits, dist.legal), [want], rtol=1e-5)
    uniform = masked(Categorical(logits=jnp.zeros((1, 4))), mask)
    np.testing.assert_allclose(losses.log_barrier(uniform.logits, uniform.legal), 0.0, atol=1e-6)
    # TRPO's bonus (`entropy_bonus: log_barrier`) is this one on a masked policy.
    config = Config.create(algorithm="trpo", entropy_bonus="log_barrier")
    bonus = policy_bonus(config, Networks(None, None, None, spec=EnvSpec((1,), True, 4)))
    np.testing.assert_allclose(bonus(dist), [want], rtol=1e-5)


def _tiny_mlp(params, obs):
    return jnp.tanh(obs @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def test_trpos_fisher_vector_product_is_the_explicit_fisher_of_the_masked_distribution():
    """F = mean_n J_n^T (diag(p_n) - p_n p_n^T) J_n, J_n the Jacobian of state n's logits and
    p_n its masked probabilities (0 on illegal actions), in float64; TRPO's FVP is the Hessian
    of its KL (`algorithms.trpo.kl_fn`) through `policy_on` on a batch holding the masks."""
    n, d, h, k = 24, 3, 4, 5
    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(6), 6)
        params = {
            "w1": jax.random.normal(keys[0], (d, h), jnp.float64),
            "b1": jax.random.normal(keys[1], (h,), jnp.float64),
            "w2": 2.0 * jax.random.normal(keys[2], (h, k), jnp.float64),
            "b2": jnp.zeros((k,), jnp.float64),
        }
        obs = jax.random.normal(keys[3], (n, d), jnp.float64)
        mask = random_masks(keys[4], n, k, one_legal_rows=3)
        nets = Networks(None, lambda p, o: Categorical(logits=_tiny_mlp(p, o)), None)
        zeros = jnp.zeros((n,), jnp.float64)
        batch = Batch(obs, zeros.astype(int), zeros, zeros, zeros, zeros, action_mask=mask)
        layout = BatchLayout(False, False, 1)
        kl = kl_fn(nets, layout, params, batch)
        flat, unravel = ravel_pytree(params)
        v = jax.random.normal(keys[5], flat.shape, jnp.float64)
        fvp = ravel_pytree(tr.fisher_vector_product(kl, params, unravel(v), 0.0))[0]

        jac = jax.jacfwd(lambda x: _tiny_mlp(unravel(x), obs))(flat)  # [n, k, P]
        p = jnp.asarray(_legal_softmax(np.asarray(_tiny_mlp(params, obs)), np.asarray(mask)))
        middle = jax.vmap(jnp.diag)(p) - p[:, :, None] * p[:, None, :]
        fisher = jnp.einsum("nkp,nkl,nlq->pq", jac, middle, jac) / n
        np.testing.assert_allclose(fvp, fisher @ v, rtol=1e-9, atol=1e-11)
        # The unmasked Fisher is another matrix: the mask is what makes them equal.
        plain = Batch(obs, zeros.astype(int), zeros, zeros, zeros, zeros)
        other = ravel_pytree(
            tr.fisher_vector_product(kl_fn(nets, layout, params, plain), params, unravel(v), 0.0)
        )[0]
        assert float(jnp.abs(other - fisher @ v).max()) > 1e-3


def test_policy_on_reads_the_batchs_mask():
    nets = Networks(None, lambda p, o: Categorical(logits=o), None)
    obs = jnp.array([[5.0, 0.0, 1.0]])
    batch = Batch(obs, jnp.zeros(1, int), *(jnp.zeros(1),) * 4, action_mask=obs < 5)
    dist = policy_on(nets, None, batch)
    assert isinstance(dist, MaskedCategorical) and int(dist.mode()[0]) == 2
    assert int(policy_on(nets, None, batch._replace(action_mask=None)).mode()[0]) == 0


BASE = ["--no-progress", "env=LegalPick", "num_envs=8", "num_steps=16", "eval_episodes=4"]
EVERY_ALGORITHM = {
    "ppo": ["algorithm=ppo"],
    "trpo": ["algorithm=trpo", "entropy_bonus=log_barrier", "hp.ent_coef=0.01"],
    "npg": ["algorithm=npg"],
    "vpg": ["algorithm=vpg"],
    "grpo": ["algorithm=grpo", "group_size=4", "num_steps=8", "num_minibatches=1"],
    "vine": ["algorithm=trpo", "sampling=vine", "vine_states=8", "vine_horizon=4"],
    "vine_sampled": ["algorithm=trpo", "sampling=vine", "vine_states=8", "vine_actions=3"],
    "ppo_gru": ["algorithm=ppo", "memory=gru", "num_minibatches=2"],
    "trpo_gru": ["algorithm=trpo", "memory=gru"],
}


def _run(tmp_path, name, argv):
    out = tmp_path / name
    assert train.main([*BASE, *argv, "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    return out, rows, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("name", sorted(EVERY_ALGORITHM))
def test_every_algorithm_acts_only_legally_on_a_masked_environment(tmp_path, name):
    """LegalPick pays 1 for a legal action, 0 for an illegal one: under the mask every
    training step and every greedy evaluation step earns 1 (8 per episode), and the update
    starts from the very policy that acted (a first ratio of 1 where the method logs it)."""
    steps = "total_env_steps=1024" if name.startswith("vine") else "total_env_steps=512"
    out, rows, summary = _run(tmp_path, name, [*EVERY_ALGORITHM[name], steps])
    assert [float(r["train/reward"]) for r in rows] == [1.0] * len(rows)
    assert summary["eval_return_mean"] == 8.0
    for key in ("ppo/first_ratio_dev", "grpo/first_ratio_dev"):
        if key in rows[0]:
            assert float(rows[0][key]) < 1e-5, (key, rows[0][key])
    entropy = float(rows[0]["policy/entropy"])
    assert entropy < np.log(6) - 0.3  # over the legal actions (about 3.4 of 6 on average)


def test_without_the_mask_the_same_run_takes_illegal_actions(tmp_path):
    _, rows, _ = _run(
        tmp_path, "off", ["algorithm=ppo", "mask_actions=false", "total_env_steps=256"]
    )
    assert float(rows[0]["train/reward"]) < 0.8
    assert float(rows[0]["policy/entropy"]) > np.log(6) - 0.05


def test_the_rollout_stores_the_mask_of_each_state_and_evaluation_obeys_it():
    from rlax_trpo import make_trainer

    trainer = make_trainer(Config.create(algorithm="ppo", env="LegalPick-one", num_envs=4))
    state = jax.jit(trainer.init)(jax.random.key(0), trainer.config.hp)
    assert trainer.env.spec.masked
    mask = legal_actions(trainer.env, state.env_state)
    np.testing.assert_array_equal(mask, state.obs > 0)  # the observation shows the mask
    unmasked = make_trainer(Config.create(algorithm="ppo", mask_actions=False, env="LegalPick"))
    assert unmasked.env.action_mask is None and not unmasked.env.spec.masked


@pytest.mark.parametrize("greedy", [True, False])
def test_a_recorded_episode_acts_over_the_mask_of_each_state(greedy):
    """The episode recorder (videos, `rlax-trpo eval --record`) masks by the state it is in:
    an untrained policy earns LegalPick's 1 at every step of the episode."""
    from rlax_trpo import make_trainer
    from rlax_trpo.evaluate import make_episode_recorder, record_episode

    config = Config.create(algorithm="ppo", env="LegalPick", num_envs=4)
    trainer = make_trainer(config)
    state = jax.jit(trainer.init)(jax.random.key(0), config.hp)
    recorder = make_episode_recorder(config, trainer.env, trainer.networks, greedy, chunk=4)
    episode = record_episode(recorder, state, jax.random.key(3))
    end = int(np.argmax(np.asarray(episode.done)))
    np.testing.assert_array_equal(np.asarray(episode.reward)[: end + 1], np.ones(end + 1))
    assert end + 1 == 8


@pytest.mark.parametrize("every_action", [False, True])
def test_the_vines_branches_act_over_the_mask_of_their_restored_states(every_action):
    """LegalPick's branches: the first action of a sampled branch and every step after it
    follow the mask of the state they are in, so each branch earns 1 a step until its
    episode ends (0 after); every-action branches keep the masks with them."""
    env, num_envs = make_env("LegalPick"), 8
    obs, states = reset_envs(env, jax.random.key(0), num_envs)
    carry = EnvCarry(states, obs, fresh_episodes(num_envs))
    uniform = lambda o: Categorical(logits=jnp.zeros(o.shape[:-1] + (6,)))
    collect = vine.make_vine_collect(16, 6 if every_action else 3, 12, every_action)
    ro = jax.jit(lambda k: collect(env, uniform, carry, k, 8))(jax.random.key(1))
    branches = ro.trajectory.branches
    np.testing.assert_array_equal(branches.action_mask, branches.obs > 0)
    reward = np.asarray(branches.reward)
    after = reward[..., 1:]  # the branch policy's steps: 1s, then 0s once the episode ended
    assert set(np.unique(after)) == {0.0, 1.0} and (np.diff(after, axis=-1) <= 0).all()
    if every_action:  # branch k starts with action k: 1 exactly where it is legal
        np.testing.assert_array_equal(reward[..., 0], branches.action_mask)
    else:
        assert (reward[..., 0] == 1).all()


def test_a_saved_policy_acts_over_the_mask_it_is_given(tmp_path):
    import rlax_trpo

    out, _, _ = _run(tmp_path, "saved", ["algorithm=ppo", "total_env_steps=256"])
    policy = rlax_trpo.load_policy(out)
    obs = jnp.ones((3, 6))
    mask = jnp.eye(6, dtype=bool)[jnp.array([1, 4, 5])]
    np.testing.assert_array_equal(policy.act(obs, action_mask=mask), [1, 4, 5])
    sampled = policy.act(obs, jax.random.key(0), deterministic=False, action_mask=mask)
    np.testing.assert_array_equal(sampled, [1, 4, 5])
    with pytest.raises(ValueError, match="last axis must have 6 entries"):
        policy.act(obs, action_mask=jnp.ones((3, 5), bool))


@pytest.mark.parametrize(
    "env, message",
    [
        ("LegalPick-wrong_size", r"action mask has shape \(5,\); it must be \(6,\)"),
        ("LegalPick-continuous", "gives an action mask, but its actions are continuous"),
    ],
)
def test_a_faulty_mask_is_refused_in_one_line(tmp_path, capsys, env, message):
    with pytest.raises(ConfigError, match=message):
        make_env(env)
    out = tmp_path / "run"
    assert train.main([*BASE, f"env={env}", "total_env_steps=256", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "action mask" in err[0], err
    assert not out.exists()


jumanji = pytest.importorskip("jumanji")


def test_jumanjis_mask_is_the_observations():
    env = make_env("jumanji/Knapsack-v1")
    assert env.spec.masked and env.spec.num_actions == 50
    obs, state = jax.jit(env.reset)(jax.random.key(0))
    inner = jumanji.make("Knapsack-v1")
    _, timestep = jax.jit(inner.reset)(jax.random.key(0))
    np.testing.assert_array_equal(env.action_mask(state), timestep.observation.action_mask)
    res = jax.jit(env.step)(jax.random.key(1), state, jnp.int32(7))
    assert not bool(env.action_mask(res.state)[7])  # a packed item is no longer legal


def test_a_joint_multi_discrete_action_becomes_one_discrete_action():
    env = make_env("jumanji/Minesweeper-v0")
    assert env.spec.num_actions == 100 and env.spec.masked
    _, state = jax.jit(env.reset)(jax.random.key(0))
    res = jax.jit(env.step)(jax.random.key(1), state, jnp.int32(3 * 10 + 7))
    assert not bool(res.terminated | res.truncated)
    # Action 37 is row 3, column 7: the board Jumanji's own step gives for [3, 7].
    inner, _ = jax.jit(jumanji.make("Minesweeper-v0").step)(state.inner, jnp.array([3, 7]))
    np.testing.assert_array_equal(res.state.inner.board, inner.board)
    assert bool(env.action_mask(state)[37]) and not bool(env.action_mask(res.state)[37])
    with pytest.raises(ConfigError, match="no single discrete action, nor a multi-discrete"):
        make_env("jumanji/JobShop-v0")
