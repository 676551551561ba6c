"""TRPO / NPG in the training loop: invariants of the update and a short CartPole run."""

from pathlib import Path

import conftest
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import Config, load_config, make_trainer
from rlax_trpo.report.stats import final_returns, to_numpy
from rlax_trpo.rollout import EnvCarry, collect

ROOT = Path(__file__).resolve().parents[1]
TRPO_METRICS = (
    "trpo/cg_residual",
    "trpo/expected_improvement",
    "trpo/actual_improvement",
    "trpo/kl",
    "trpo/line_search_steps",
    "trpo/accepted",
)


def one_batch(config):
    trainer = make_trainer(config)
    hp = config.hp
    state = trainer.init(jax.random.key(0), hp)
    policy = lambda obs: trainer.networks.policy(state.params.policy, obs)
    carry = EnvCarry(state.env_state, state.obs, state.episode)
    ro = collect(trainer.env, policy, carry, jax.random.key(1), config.num_steps)
    batch = trainer.algorithm.make_batch(state.params, ro.trajectory, hp)
    return trainer, state, batch


@pytest.mark.parametrize("algorithm", ["trpo", "npg"])
def test_advantage_scale_leaves_the_update_unchanged(algorithm):
    config = Config.create(
        algorithm=algorithm,
        num_envs=2,
        num_steps=64,
        total_env_steps=128,
        hidden_sizes=[16],
        normalize_advantages=False,
        value_minibatches=2,
        value_epochs=1,
        cg_iters=20,
    )
    trainer, state, batch = one_batch(config)
    update = jax.jit(trainer.algorithm.update)
    key = jax.random.key(2)
    base, _, m = update(state.params, state.algo_state, batch, config.hp, key)
    assert float(m["trpo/accepted"]) == 1.0  # the comparison is about a step that moved
    for c in (0.05, 20.0):
        scaled = batch._replace(advantage=c * batch.advantage)
        new, _, _ = update(state.params, state.algo_state, scaled, config.hp, key)
        for a, b, old in zip(
            jax.tree.leaves(new.policy),
            jax.tree.leaves(base.policy),
            jax.tree.leaves(state.params.policy),
            strict=True,
        ):
            np.testing.assert_allclose(a - old, b - old, rtol=2e-3, atol=1e-7)


def test_trpo_cartpole_learns_and_respects_the_trust_region():
    # The shipped configuration at 40% of its budget, 4 seeds in one vmapped call (the batch
    # at which jax's CG with an unbatched initial guess failed: docs/upstream/cg_unbatched_x0.md).
    config = load_config(ROOT / "configs" / "trpo_cartpole.yaml", ["total_env_steps=40960"])
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), 4)
    train = conftest.jit_default_codegen(jax.vmap(trainer.train, in_axes=(0, None)))
    m = to_numpy(train(keys, config.hp)[1])
    for name in TRPO_METRICS:
        assert name in m and np.isfinite(m[name]).all(), name
    hp = config.hp
    accepted = m["trpo/accepted"] == 1.0
    assert accepted.mean() > 0.5
    # Every accepted step: realised KL within the bound and a positive surrogate gain.
    bound = float(hp.max_kl * hp.kl_slack)
    assert (m["trpo/kl"][accepted] <= bound * (1 + 1e-4)).all()
    assert (m["trpo/actual_improvement"][accepted] > 0).all()
    # Rejected steps leave the policy where it was: zero KL and zero gain.
    assert np.allclose(m["trpo/kl"][~accepted], 0.0, atol=1e-7)
    assert np.allclose(m["trpo/actual_improvement"][~accepted], 0.0, atol=1e-6)
    assert (m["trpo/line_search_steps"][~accepted] == config.line_search_steps).all()
    assert float(np.max(m["trpo/cg_residual"])) < 1e-3  # jax's CG, stopped at 1e-5 or 15 steps
    # Learning: random play scores about 22; TRPO is well above it after 40 iterations.
    finals = final_returns(m)
    assert finals.min() >= 200, finals


def test_npg_always_steps_to_the_trust_region_radius():
    config = load_config(
        ROOT / "configs" / "npg_cartpole.yaml", ["total_env_steps=8192", "value_epochs=2"]
    )
    trainer = make_trainer(config)
    _, metrics = jax.jit(trainer.train)(jax.random.key(1), config.hp)
    m = to_numpy(metrics)
    assert (m["trpo/accepted"] == 1.0).all() and (m["trpo/line_search_steps"] == 0).all()
    # The realised KL of the full step is close to its quadratic model, delta.
    kl = m["trpo/kl"] / float(config.hp.max_kl)
    assert 0.3 < float(np.median(kl)) < 3.0, kl


@pytest.mark.parametrize(
    "algorithm,env,advantage",
    [
        ("trpo", "Pendulum-v1", "mc"),
        ("npg", "CartPole-v1", "nstep"),
    ],
)
def test_runs_with_every_estimator_and_action_space(algorithm, env, advantage):
    # (gae on CartPole is covered by the learning tests above.)
    config = Config.create(
        algorithm=algorithm,
        env=env,
        advantage=advantage,
        num_envs=2,
        num_steps=32,
        total_env_steps=128,
        hidden_sizes=[8],
        value_epochs=1,
        value_minibatches=2,
        fisher_fraction=0.5,
    )
    trainer = make_trainer(config)
    state, metrics = jax.jit(trainer.train)(jax.random.key(0), config.hp)
    for name in TRPO_METRICS + ("value/loss", "policy/entropy"):
        assert np.isfinite(np.asarray(metrics[name])).all(), name
    assert metrics["trpo/kl"].shape == (config.num_iterations,)
    assert float(jnp.max(metrics["trpo/accepted"])) == 1.0
    assert int(state.diverged_at) == -1


def test_a_rejected_step_leaves_the_policy_bit_identical():
    # A poisoned batch (one NaN advantage) poisons every line-search candidate: none passes,
    # and the update must keep the old policy bit for bit.
    config = Config.create(
        algorithm="trpo",
        env="CartPole-v1",
        num_envs=2,
        num_steps=64,
        total_env_steps=128,
        hidden_sizes=[16],
        value_minibatches=2,
        value_epochs=1,
        line_search_steps=3,
        normalize_advantages=False,
    )
    trainer, state, batch = one_batch(config)
    update = jax.jit(trainer.algorithm.update)
    poisoned = batch._replace(advantage=batch.advantage.at[5, 1].set(jnp.nan))
    new, _, m = update(state.params, state.algo_state, poisoned, config.hp, jax.random.key(2))
    assert float(m["trpo/accepted"]) == 0.0 and float(m["trpo/line_search_steps"]) == 3
    assert float(m["trpo/step_fraction"]) == 0.0 and float(m["trpo/kl"]) == 0.0
    for a, b in zip(jax.tree.leaves(new.policy), jax.tree.leaves(state.params.policy), strict=True):
        np.testing.assert_array_equal(a, b)
    # The clean batch is accepted: the rejection came from the poisoned candidates.
    _, _, ok = update(state.params, state.algo_state, batch, config.hp, jax.random.key(2))
    assert float(ok["trpo/accepted"]) == 1.0


def test_the_entropy_bonus_has_its_closed_form_gradient():
    """d/dtheta [L + c H] on a one-state categorical policy with logits theta:
    dH/dtheta_i = -p_i (log p_i + H), so the bonus adds c times that to the surrogate's."""
    import distrax

    from rlax_trpo.algorithms.trpo import with_entropy_bonus

    theta = jnp.array([0.3, -1.2, 0.8])
    entropy = lambda logits: distrax.Categorical(logits=logits).entropy()
    surrogate = lambda logits: jax.nn.log_softmax(logits)[2]  # any smooth L
    objective = with_entropy_bonus(surrogate, entropy, jnp.float32(0.2))
    p = np.asarray(jax.nn.softmax(theta))
    h = -(p * np.log(p)).sum()
    expected = np.asarray(jax.grad(surrogate)(theta)) + 0.2 * (-p * (np.log(p) + h))
    np.testing.assert_allclose(jax.grad(objective)(theta), expected, rtol=1e-5, atol=1e-7)
    assert float(objective(theta)) == pytest.approx(float(surrogate(theta)) + 0.2 * h, rel=1e-6)


def test_the_log_barrier_has_its_closed_form_value_and_gradient():
    """-KL(U || softmax(z)) = mean_a log p_a + log K, with gradient 1/K - p_a in the logits:
    it does not vanish at a nearly deterministic state, where the entropy's does."""
    from rlax_trpo.losses import log_barrier

    for z in ([0.3, -1.2, 0.8], [12.0, -3.0, 0.5, 1.0]):
        z = jnp.array(z)
        p = np.asarray(jax.nn.softmax(z), np.float64)
        k = len(p)
        assert float(log_barrier(z)) == pytest.approx(np.log(p).mean() + np.log(k), rel=1e-5)
        np.testing.assert_allclose(jax.grad(log_barrier)(z), 1 / k - p, rtol=1e-5, atol=1e-7)
    assert float(log_barrier(jnp.zeros((5,)))) == pytest.approx(0.0, abs=1e-6)  # uniform
    sharp = jnp.array([12.0, -3.0, 0.5])  # p_0 > 0.9999
    entropy_grad = jax.grad(lambda z: jax.scipy.special.entr(jax.nn.softmax(z)).sum())(sharp)
    assert float(jnp.abs(entropy_grad).max()) < 2e-3
    assert float(jnp.abs(jax.grad(log_barrier)(sharp)).max()) > 0.3


def test_the_bonus_is_the_entropy_or_the_log_barrier_per_state():
    from rlax_trpo.algorithms.trpo import policy_bonus

    base = dict(algorithm="trpo", num_envs=2, num_steps=16, total_env_steps=32, hidden_sizes=[8])
    trainer = make_trainer(Config.create(**base))
    params = trainer.init(jax.random.key(0), Config.create(**base).hp).params.policy
    obs = jax.random.normal(jax.random.key(3), (6, *trainer.env.spec.obs_shape))
    dist = trainer.networks.policy(jax.tree.map(lambda x: 5.0 * x, params), obs)
    log_p = np.asarray(jax.nn.log_softmax(dist.logits), np.float64)
    for form, expected in (
        ("entropy", -(np.exp(log_p) * log_p).sum(-1)),
        ("log_barrier", log_p.mean(-1) + np.log(log_p.shape[-1])),
    ):
        config = Config.create(**base, entropy_bonus=form)
        got = policy_bonus(config, trainer.networks)(dist)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_the_log_barrier_is_refused_for_continuous_actions():
    from rlax_trpo.errors import ConfigError

    config = load_config("trpo_pendulum", ["entropy_bonus=log_barrier", "hp.ent_coef=0.01"])
    with pytest.raises(ConfigError, match="log_barrier needs discrete actions"):
        make_trainer(config)


@pytest.mark.parametrize("bonus", ["entropy", "log_barrier"])
@pytest.mark.parametrize("algorithm", ["trpo", "npg"])
def test_with_no_advantage_the_bonus_alone_raises_the_entropy_inside_the_trust_region(
    algorithm, bonus
):
    # Zero advantages: the surrogate is flat, so only the bonus can move the policy; the step
    # must raise the entropy, keep KL within the bound, and (TRPO) pass the line search's
    # improvement test on the bonus. Without it (ent_coef 0) nothing improves: no step.
    config = Config.create(
        algorithm=algorithm,
        num_envs=2,
        num_steps=64,
        total_env_steps=128,
        hidden_sizes=[16],
        normalize_advantages=False,
        value_minibatches=2,
        value_epochs=1,
        hp={"ent_coef": 0.5, "max_kl": 0.01},
        entropy_bonus=bonus,
    )
    trainer, state, batch = one_batch(config)
    flat = batch._replace(advantage=jnp.zeros_like(batch.advantage))
    # Far from uniform (the initial policy is nearly uniform: nothing to raise there).
    sharp = jax.tree.map(lambda x: 20.0 * x, state.params.policy)
    state = state.replace(params=state.params._replace(policy=sharp))
    flat = flat._replace(log_prob=trainer.networks.policy(sharp, flat.obs).log_prob(flat.action))
    update = jax.jit(trainer.algorithm.update)
    new, _, m = update(state.params, state.algo_state, flat, config.hp, jax.random.key(2))
    obs = batch.obs.reshape((-1,) + batch.obs.shape[2:])
    before = trainer.networks.policy(state.params.policy, obs).entropy().mean()
    after = trainer.networks.policy(new.policy, obs).entropy().mean()
    assert float(after) > float(before)
    if bonus == "log_barrier":
        from rlax_trpo.losses import log_barrier

        barrier = lambda p: log_barrier(trainer.networks.policy(p, obs).logits).mean()
        assert float(barrier(new.policy)) > float(barrier(state.params.policy))
    assert 0.0 < float(m["trpo/kl"]) <= 0.01 * 1.01
    assert float(m["trpo/accepted"]) == 1.0
    if algorithm == "trpo":
        plain = config.hp.replace(ent_coef=jnp.float32(0.0))
        _, _, m0 = update(state.params, state.algo_state, flat, plain, jax.random.key(2))
        assert float(m0["trpo/accepted"]) == 0.0  # a flat surrogate improves nowhere


def at_iteration(algo_state, iteration, steps_per_iteration=2):
    """`algo_state` with the critic's Adam count at `iteration` (value_epochs x
    value_minibatches steps an iteration): TRPO reads its iteration off that count."""
    critic = algo_state.value_opt_state
    count = jnp.int32(steps_per_iteration * iteration)
    return algo_state._replace(value_opt_state=critic._replace(count=count))


@pytest.mark.parametrize(
    "flag,name", [("anneal_ent_coef", "ent_coef"), ("anneal_max_kl", "max_kl")]
)
@pytest.mark.parametrize("algorithm", ["trpo", "npg"])
def test_an_annealed_hp_falls_linearly_to_zero_over_the_run(algorithm, flag, name):
    # anneal_ent_coef / anneal_max_kl: at iteration k of N the step is the one of the value
    # v (1 - k/N). The iteration is read off the critic's optimiser (value_epochs x
    # value_minibatches = 2 steps an iteration), so setting its count places the update at k.
    base = dict(algorithm=algorithm, num_envs=2, num_steps=64, total_env_steps=512,
                hidden_sizes=[16], value_minibatches=2, value_epochs=1,
                hp={"ent_coef": 0.5, "max_kl": 0.02})  # fmt: skip
    config = Config.create(**base, **{flag: True})
    assert config.num_iterations == 4 and not getattr(Config.create(**base), flag)
    trainer, state, batch = one_batch(config)
    plain = make_trainer(Config.create(**base))

    def step(trainer, iteration, value):
        algo_state = at_iteration(state.algo_state, iteration)
        hp = config.hp.replace(**{name: jnp.float32(value)})
        return conftest.updated_policy(trainer, state.params, algo_state, batch, hp)

    v = float(getattr(config.hp, name))
    full, quarter = step(plain, 0, v), step(plain, 0, v / 4)
    assert np.abs(full - quarter).max() > 1e-4  # the value moves the step
    np.testing.assert_allclose(step(trainer, 0, v), full, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(step(trainer, 3, v), quarter, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(step(plain, 3, v), full, rtol=1e-6, atol=1e-7)  # unannealed


@pytest.mark.parametrize("algorithm", ["trpo", "npg"])
def test_an_annealed_critic_learning_rate_falls_linearly_to_zero_over_the_run(algorithm):
    # anneal_value_lr: at iteration k of N the critic's Adam steps are those of the
    # learning rate lr (1 - k/N); the policy's step does not change.
    base = dict(algorithm=algorithm, num_envs=2, num_steps=64, total_env_steps=512,
                hidden_sizes=[16], value_minibatches=2, value_epochs=1,
                hp={"value_learning_rate": 0.01})  # fmt: skip
    config = Config.create(**base, anneal_value_lr=True)
    assert config.num_iterations == 4 and not Config.create(**base).anneal_value_lr
    trainer, state, batch = one_batch(config)
    plain = make_trainer(Config.create(**base))

    def step(trainer, iteration, lr):
        algo_state = at_iteration(state.algo_state, iteration)
        hp = config.hp.replace(value_learning_rate=jnp.float32(lr))
        update = jax.jit(trainer.algorithm.update)
        new, _, _ = update(state.params, algo_state, batch, hp, jax.random.key(2))
        flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])
        return flat(new.value), flat(new.policy)

    (full, policy), (quarter, _) = step(plain, 3, 0.01), step(plain, 3, 0.0025)
    assert np.abs(full - quarter).max() > 1e-4  # the learning rate moves the critic
    annealed_value, annealed_policy = step(trainer, 3, 0.01)
    np.testing.assert_allclose(annealed_value, quarter, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(annealed_policy, policy, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(step(trainer, 0, 0.01)[0], step(plain, 0, 0.01)[0], rtol=1e-6)


@pytest.mark.parametrize("algorithm", ["trpo", "npg"])
def test_natural_lr_caps_the_update_below_the_trust_region(algorithm):
    config = Config.create(algorithm=algorithm, num_envs=2, num_steps=64, total_env_steps=128,
                           hidden_sizes=[16], value_minibatches=2, value_epochs=1)  # fmt: skip
    trainer, state, batch = one_batch(config)
    update = jax.jit(trainer.algorithm.update)
    args = (state.params, state.algo_state, batch)
    _, _, edge = update(*args, config.hp, jax.random.key(2))
    assert float(edge["trpo/quadratic_kl"]) == pytest.approx(0.01, rel=1e-3)  # max_kl
    capped = config.hp.replace(natural_lr=jnp.float32(1e-3))
    _, _, small = update(*args, capped, jax.random.key(2))
    # alpha = 1e-3 F^-1 g, far inside the region (the closed form: test_trust_region.py)
    assert float(small["trpo/quadratic_kl"]) < 1e-2 * float(edge["trpo/quadratic_kl"])
    assert abs(float(small["trpo/kl"])) < 1e-2 * float(edge["trpo/kl"])  # ~0, to rounding
    assert float(small["trpo/step_fraction"]) == 1.0 and float(small["trpo/accepted"]) == 1.0


def test_the_update_evaluates_line_search_batch_candidates_at_a_time(monkeypatch):
    """`line_search_batch` reaches the line search, and the update it gives is the one of all
    candidates at once (to rounding)."""
    from rlax_trpo import trust_region as tr

    seen = []
    search = tr.backtracking_line_search
    monkeypatch.setattr(tr, "backtracking_line_search", lambda *a: seen.append(a[-1]) or search(*a))
    base = dict(algorithm="trpo", num_envs=2, num_steps=32, total_env_steps=64, hidden_sizes=[8],
                value_minibatches=2, value_epochs=1, line_search_steps=4)  # fmt: skip
    metrics = []
    for batch in (0, 3):
        config = Config.create(**base, line_search_batch=batch)
        trainer, state, data = one_batch(config)
        args = (state.params, state.algo_state, data, config.hp, jax.random.key(2))
        metrics.append(jax.jit(trainer.algorithm.update)(*args)[2])
    assert seen == [0, 3]
    for name in ("trpo/kl", "trpo/step_fraction", "trpo/actual_improvement"):
        np.testing.assert_allclose(metrics[1][name], metrics[0][name], rtol=1e-5, atol=1e-8)
