"""Memory policies (GRU/LSTM): resets at episode boundaries, the stored start memory, whole
sequences in every minibatch, the recurrent Fisher-vector product, every algorithm, the
partially observed tasks, `load_policy`, and a killed and resumed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import conftest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import train
from rlax_trpo import Config, load_policy, make_trainer
from rlax_trpo import trust_region as tr
from rlax_trpo.algorithms.common import BatchLayout, sequence_minibatches
from rlax_trpo.algorithms.trpo import kl_fn
from rlax_trpo.envs import make_env
from rlax_trpo.memory import Memory, MemoryNet
from rlax_trpo.networks import make_networks
from rlax_trpo.types import Batch

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "env": "pomdp/CartPole-v1",
    "memory": "gru",
    "memory_size": 8,
    "hidden_sizes": (16,),
    "num_envs": 4,
    "num_steps": 16,
    "total_env_steps": 128,
}


def _config(**overrides) -> Config:
    return Config.create(**{**TINY, **overrides})


def _sequences(config: Config, key, steps=6):
    """Random observations `[T, B, 2]`, episode starts, actions and start memory."""
    spec = make_env(config.env).spec
    nets = make_networks(config, spec)
    k_obs, k_first, k_act, k_mem, k_par = jax.random.split(key, 5)
    b = config.num_envs
    obs = jax.random.normal(k_obs, (steps, b, *spec.obs_shape))
    first = jax.random.bernoulli(k_first, 0.3, (steps, b))
    action = jax.random.randint(k_act, (steps, b), 0, spec.num_actions)
    memory = jax.tree.map(lambda h: jax.random.normal(k_mem, h.shape), nets.memory.initial(b))
    return nets, nets.init(k_par), obs, first, action, memory


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_nothing_crosses_an_episode_start(cell):
    """After a step marked `first`, the policy's outputs do not depend on anything before it
    (observations or the memory the sequence started from), in the learner's re-run and in
    the one-step function the rollout acts with."""
    config = _config(memory=cell)
    nets, params, obs, first, _, memory = _sequences(config, jax.random.key(0))
    first = first.at[3].set(True)  # every environment starts an episode at t = 3
    logits = lambda o, m: nets.memory.policy_sequence(params.policy, m.policy, o, first).logits
    base = logits(obs, memory)
    other_obs = obs.at[:3].set(jax.random.normal(jax.random.key(9), obs[:3].shape))
    other_mem = jax.tree.map(lambda h: h + 1.0, memory)
    for changed in (logits(other_obs, memory), logits(obs, other_mem)):
        np.testing.assert_array_equal(changed[3:], base[3:])
        assert not np.allclose(changed[:3], base[:3])  # before it, they do depend
    # The one-step form, starting an episode: the memory it was given is ignored.
    step = lambda m: nets.memory.policy_step(params.policy, m.policy, obs[0], jnp.ones(4, bool))
    np.testing.assert_array_equal(step(memory)[1].logits, step(other_mem)[1].logits)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_the_cells_are_flaxs_cells(cell):
    """The fused cell (one recurrent product per step, input projections outside the scan)
    computes flax's GRUCell / LSTMCell with the same weights, gate by gate."""
    net = MemoryNet("value", 1, (5,), "tanh", False, cell, 4)
    obs = jax.random.normal(jax.random.key(0), (3, 2))
    memory = jax.tree.map(
        lambda h: jax.random.normal(jax.random.key(1), h.shape), _zeros_memory(cell, 3, 4)
    )
    initial = net.init(jax.random.key(2), memory, obs, jnp.zeros(3, bool))["params"]
    n = 3 if cell == "gru" else 4
    blocks = lambda a: jnp.split(a, n, axis=-1)
    # Every gate block of both kernels starts orthogonal (orthonormal columns, or rows if wider).
    for k in (*blocks(initial["inputs"]["kernel"]), *blocks(initial["recurrent_kernel"])):
        gram = k.T @ k if k.shape[0] >= k.shape[1] else k @ k.T
        np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-5)
    # Trained weights, not the initial ones (whose biases are zero).
    leaves, tree = jax.tree.flatten(initial)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    noise = [0.5 * jax.random.normal(k, a.shape) for k, a in zip(keys, leaves, strict=True)]
    params = jax.tree.unflatten(tree, [a + e for a, e in zip(leaves, noise, strict=True)])
    x = net.apply({"params": params}, obs, method=lambda m, o: m.torso(o))
    ours = net.apply(
        {"params": params},
        memory,
        net.apply({"params": params}, obs, method=MemoryNet.embed),
        jnp.zeros(3, bool),
        method=MemoryNet.step,
    )
    w_in, b_in, w_rec = (
        params["inputs"]["kernel"],
        params["inputs"]["bias"],
        params["recurrent_kernel"],
    )
    if cell == "gru":
        flax_cell, names = nn.GRUCell(4), "rzn"
        flax_params = {
            f"i{g}": {"kernel": k, "bias": b}
            for g, k, b in zip(names, blocks(w_in), blocks(b_in), strict=True)
        }
        flax_params |= {f"h{g}": {"kernel": k} for g, k in zip(names, blocks(w_rec), strict=True)}
        flax_params["hn"]["bias"] = params["recurrent_bias"]
    else:
        flax_cell, names = nn.LSTMCell(4), "ifgo"
        flax_params = {f"i{g}": {"kernel": k} for g, k in zip(names, blocks(w_in), strict=True)}
        flax_params |= {
            f"h{g}": {"kernel": k, "bias": b}
            for g, k, b in zip(names, blocks(w_rec), blocks(b_in), strict=True)
        }
    theirs = flax_cell.apply({"params": flax_params}, memory, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), ours, theirs)


def _zeros_memory(cell, batch, size):
    zeros = jnp.zeros((batch, size))
    return (zeros, zeros) if cell == "lstm" else zeros


def test_sequence_equals_the_steps_the_rollout_takes():
    config = _config()
    nets, params, obs, first, _, memory = _sequences(config, jax.random.key(1))
    seq = nets.memory.policy_sequence(params.policy, memory.policy, obs, first).logits
    m, steps = memory.policy, []
    for t in range(obs.shape[0]):
        m, dist = nets.memory.policy_step(params.policy, m, obs[t], first[t])
        steps.append(dist.logits)
    np.testing.assert_allclose(seq, np.stack(steps), rtol=1e-6, atol=1e-6)


def test_minibatches_hold_whole_environment_sequences():
    """Each minibatch is B/M environments with all T steps in order and their own start
    memory; together they hold every environment once."""
    t, b, m = 5, 8, 4
    env_id = jnp.broadcast_to(jnp.arange(b, dtype=jnp.float32), (t, b))
    step_id = jnp.broadcast_to(jnp.arange(t, dtype=jnp.float32)[:, None], (t, b))
    batch = Batch(env_id, step_id, env_id, env_id, env_id, env_id, step_id > 0)
    batch = batch._replace(memory=Memory(jnp.arange(b, dtype=jnp.float32)[:, None], None))
    mbs = sequence_minibatches(batch, jax.random.key(3), m)
    assert mbs.obs.shape == (m, t, b // m)
    for i in range(m):
        ids = np.asarray(mbs.obs[i, 0])
        assert (np.asarray(mbs.obs[i]) == ids).all()  # the same environments at every step
        assert (np.asarray(mbs.action[i]) == np.arange(t)[:, None]).all()  # time in order
        np.testing.assert_array_equal(mbs.memory.policy[i, :, 0], ids)
    assert sorted(np.asarray(mbs.obs[:, 0]).ravel()) == list(range(b))


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_recurrent_fisher_vector_product_is_the_kl_hessian(cell):
    """F v through a GRU/LSTM policy over whole sequences (what TRPO's CG solves with) equals
    the explicit Hessian of the mean KL, built with jax.hessian, times v."""
    config = _config(memory=cell, memory_size=3, hidden_sizes=(4,), num_envs=2)
    nets, params, obs, first, action, memory = _sequences(config, jax.random.key(4), steps=3)
    zeros = jnp.zeros(first.shape)
    batch = Batch(obs, action, zeros, zeros, zeros, zeros, first, memory)
    layout = BatchLayout(sequences=True, env_major=False, groups=1)
    kl = kl_fn(nets, layout, params.policy, batch)
    flat, unravel = ravel_pytree(params.policy)
    v = jax.random.normal(jax.random.key(5), flat.shape)
    fvp = ravel_pytree(tr.fisher_vector_product(kl, params.policy, unravel(v), 0.0))[0]
    hessian = jax.hessian(lambda x: kl(unravel(x)))(flat)
    np.testing.assert_allclose(fvp, hessian @ v, rtol=1e-4, atol=1e-6)
    assert np.abs(hessian @ v).max() > 1e-4  # the KL does reach the recurrent weights
    # A sequence cut at t = 1 (a wrong start memory for the rest) is another quadratic form.
    cut = kl_fn(nets, layout, params.policy, batch._replace(first=first.at[1].set(True)))
    fvp_cut = ravel_pytree(tr.fisher_vector_product(cut, params.policy, unravel(v), 0.0))[0]
    assert not np.allclose(fvp_cut, fvp, rtol=1e-3)


@pytest.mark.parametrize("algorithm", ["ppo", "trpo", "npg", "vpg", "grpo"])
def test_every_algorithm_trains_with_memory(algorithm):
    """One compiled run of each algorithm with a GRU policy (and critic; NPG's critic is
    feed-forward, `value_memory: none`): finite, and PPO's and GRPO's first minibatch sees
    the rollout's own log-probabilities (ratio 1 to 1e-6)."""
    extra = {"value_memory": "none"} if algorithm == "npg" else {}
    if algorithm == "grpo":  # (groups of 2 at memory_size 8: XLA:CPU compiles for 10+ min)
        extra = {"group_size": 4, "num_envs": 8, "num_minibatches": 2, "memory_size": 16}
    if algorithm == "ppo":
        extra = {"num_minibatches": 2, "num_epochs": 2}
    config = _config(algorithm=algorithm, **{"total_env_steps": 192, **extra})
    trainer = make_trainer(config)
    state, metrics = jax.jit(trainer.train)(jax.random.key(0), config.hp)
    nonfinite = [k for k, v in metrics.items() if not np.isfinite(np.asarray(v)).all()]
    assert nonfinite in ([], ["episode/return"])  # NaN until a first episode ends
    assert int(state.diverged_at) == -1 and float(metrics["train/finite"].min()) == 1.0
    if algorithm in ("ppo", "grpo"):
        assert float(np.max(metrics[f"{algorithm}/first_ratio_dev"])) < 1e-6
    if algorithm in ("trpo", "npg"):
        assert float(np.min(metrics["trpo/cg_residual"])) >= 0
    assert state.memory.policy.shape == (config.num_envs, config.memory_size)
    assert (state.memory.value is None) == (algorithm in ("grpo", "npg"))
    if algorithm == "npg":  # the feed-forward critic beside the memory policy learns
        assert np.isfinite(np.asarray(metrics["value/loss"])).all()


def test_velocities_are_hidden():
    full, part = make_env("CartPole-v1"), make_env("pomdp/CartPole-v1")
    key = jax.random.key(0)
    obs_full, _ = full.reset(key)
    obs_part, state = part.reset(key)
    assert part.spec.obs_shape == (2,)
    np.testing.assert_array_equal(obs_part, obs_full[jnp.array([0, 2])])
    assert part.step(key, state, 1).obs.shape == (2,)
    assert make_env("pomdp/Pendulum-v1").spec.obs_shape == (2,)
    assert make_env("pomdp/Acrobot-v1").spec.obs_shape == (4,)


def test_minibatches_must_be_whole_environments():
    with pytest.raises(Exception, match="does not divide num_envs = 4; with memory"):
        make_trainer(_config(algorithm="ppo", num_envs=4, num_minibatches=8))


SMALL = [
    "--seeds", "2", "--no-progress", "env=pomdp/CartPole-v1",
    "memory=gru", "memory_size=8", "hidden_sizes=[16]", "num_envs=4", "num_steps=16",
    "total_env_steps=512", "num_epochs=2", "num_minibatches=2", "eval_episodes=3",
]  # fmt: skip


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("memory") / "run"
    assert train.main([*SMALL, "--out", str(out)]) == 0
    return out


def test_load_policy_reproduces_the_runs_greedy_evaluation(memory_run):
    summary = json.loads((memory_run / "summary.json").read_text())
    for member in range(2):
        policy = load_policy(memory_run, member)
        returns = policy.evaluate()
        np.testing.assert_allclose(
            returns.mean(), summary["eval_return_per_seed"][member], rtol=1e-6
        )
    # Acting step by step with act(obs, state) plays the same greedy episode as evaluate(1).
    policy = load_policy(memory_run, 0)
    key = jax.random.key(7)
    k_reset, k_run = jax.random.split(key)
    obs, env_state = policy.env.reset(k_reset)
    state, total, act = policy.initial_state(), 0.0, jax.jit(policy.act)
    for k in jax.random.split(k_run, 500):
        action, state = act(obs, state)
        res = policy.env.step(jax.random.split(k)[1], env_state, action)
        obs, env_state, total = res.obs, res.state, total + float(res.reward)
        if res.terminated or res.truncated:
            break
    episode = policy.episode(key)
    done = np.asarray(episode.done)
    assert total == pytest.approx(float(np.asarray(episode.reward)[: np.argmax(done) + 1].sum()))


def test_a_killed_memory_run_resumes_to_the_same_metrics(memory_run, tmp_path):
    """Killed (SIGKILL) between chunks, then --resume: metrics.csv byte-identical to the
    uninterrupted run (the memory and episode starts are part of the checkpoint)."""
    from test_faults import KILL_AT

    out = tmp_path / "run"
    env = {**os.environ, "ROOT": str(ROOT), **conftest.SAME_BACKEND}
    where = ["rlax_trpo.experiment.chunks", "_chunk_metrics", "3"]
    argv = [*SMALL, "--chunk-iterations", "2", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AT, *where, *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert train.main(["--resume", str(out), "--no-progress"]) == 0
    assert (out / "metrics.csv").read_bytes() == (memory_run / "metrics.csv").read_bytes()


def test_the_critic_bootstraps_from_the_memory_of_that_step():
    """V(final_obs[t]) reads final_obs[t] with the critic's memory after step t (the same
    episode, no reset), not from the initial state."""
    config = _config(algorithm="trpo")
    nets, params, obs, first, _, memory = _sequences(config, jax.random.key(2))
    final_obs = obs + 0.5
    _, boot = nets.memory.value_sequence(params.value, memory.value, obs, first, final_obs)
    m = memory.value
    for t in range(obs.shape[0]):
        m, _ = nets.memory.value_step(params.value, m, obs[t], first[t])
        _, expected = nets.memory.value_step(params.value, m, final_obs[t], jnp.zeros(4, bool))
        np.testing.assert_allclose(boot[t], expected, rtol=1e-5, atol=1e-6)
