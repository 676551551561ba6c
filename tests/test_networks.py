"""Networks: the slice-built 3x3 convolution, distributions, initialisation scales."""

import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo import Config
from rlax_trpo.envs import make_env
from rlax_trpo.layers import patches_3x3
from rlax_trpo.networks import make_networks


def test_patches_dense_equals_a_same_convolution():
    x = jax.random.normal(jax.random.key(0), (2, 10, 10, 4))
    kernel = jax.random.normal(jax.random.key(1), (3, 3, 4, 16))
    conv = jax.lax.conv_general_dilated(
        x, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    dense = patches_3x3(x) @ kernel.reshape(9 * 4, 16)
    np.testing.assert_allclose(dense, conv, rtol=1e-4, atol=1e-4)


def test_policy_heads_and_initial_scales():
    config = Config.create(env="CartPole-v1")
    nets = make_networks(config, make_env("CartPole-v1").spec)
    params = nets.init(jax.random.key(0))
    obs = jax.random.normal(jax.random.key(1), (32, 4))
    probs = nets.policy(params.policy, obs).probs
    # the 0.01-gain policy head starts the policy near uniform
    np.testing.assert_allclose(probs, 0.5, atol=0.02)
    assert nets.value(params.value, obs).shape == (32,)

    pend = make_env("Pendulum-v1")
    nets = make_networks(Config.create(env="Pendulum-v1"), pend.spec)
    params = nets.init(jax.random.key(0))
    dist = nets.policy(params.policy, jnp.zeros((5, 3)))
    assert dist.sample(seed=jax.random.key(2)).shape == (5, 1)
    np.testing.assert_allclose(dist.stddev(), 1.0)  # learned log-std starts at 0


def test_cnn_for_minatar():
    config = Config.create(env="Breakout-MinAtar", network="cnn", hidden_sizes=[32])
    env = make_env("Breakout-MinAtar", flatten=False)
    nets = make_networks(config, env.spec)
    params = nets.init(jax.random.key(0))
    obs, _ = env.reset(jax.random.key(1))
    logits = nets.policy(params.policy, obs[None]).logits
    assert logits.shape == (1, env.spec.num_actions)


def test_cnn_on_vector_observations_is_one_line_error_before_compiling(tmp_path, capsys):
    import train

    out = tmp_path / "run"
    argv = ["--config", "ppo_breakout_minatar", "env=CartPole-v1", "--out", str(out)]
    assert train.main([*argv, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "compiling" not in captured.out
    assert captured.err.startswith("error: network: cnn needs image observations")
    assert "CartPole-v1 gives shape (4,)" in captured.err
    assert not out.exists()
