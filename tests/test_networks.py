"""Networks: the slice-built 3x3 convolution, distributions, initialisation scales, the
bfloat16 compute option."""

import re

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo import Config
from rlax_trpo.envs import make_env
from rlax_trpo.layers import patches_3x3
from rlax_trpo.networks import Categorical, make_networks


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


@pytest.mark.parametrize("sample_shape", [(), (3,)])
def test_categorical_draws_the_same_bits_as_distrax(sample_shape):
    # Our Categorical skips distrax's finite-probabilities check on every draw; for finite
    # logits (and -inf ones: actions a policy can never take) draws and log-probabilities
    # are distrax's bits, so the rollout is unchanged.
    logits = 3.0 * jax.random.normal(jax.random.key(0), (64, 7))
    logits = logits.at[::5, 2].set(-jnp.inf)
    ours, theirs = Categorical(logits=logits), distrax.Categorical(logits=logits)
    for k in range(4):
        key = jax.random.key(k)
        draws, log_prob = ours.sample_and_log_prob(seed=key, sample_shape=sample_shape)
        ref_draws, ref_log_prob = theirs.sample_and_log_prob(seed=key, sample_shape=sample_shape)
        assert draws.shape == sample_shape + (64,) and draws.dtype == ref_draws.dtype
        np.testing.assert_array_equal(draws, ref_draws)
        np.testing.assert_array_equal(log_prob, ref_log_prob)
        np.testing.assert_array_equal(ours.sample(seed=key), theirs.sample(seed=key))
    assert len(np.unique(np.asarray(draws))) > 3  # the draws vary across the batch
    assert not np.any(np.asarray(draws)[..., ::5] == 2)  # never an impossible action
    config = Config.create(env="CartPole-v1")  # the discrete head builds ours
    nets = make_networks(config, make_env("CartPole-v1").spec)
    assert type(nets.policy(nets.init(jax.random.key(0)).policy, jnp.zeros((2, 4)))) is Categorical


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


@pytest.mark.parametrize(
    "env, extra",
    [("CartPole-v1", {}), ("Pendulum-v1", {}), ("CartPole-v1", {"memory": "gru"})],
)
def test_bfloat16_compute_keeps_float32_parameters_and_outputs(env, extra):
    """`compute_dtype: bfloat16`: the same float32 parameters, float32 logits/means and
    values within bfloat16 rounding of the float32 networks', and products in bfloat16."""
    spec = make_env(env).spec
    nets = {
        dtype: make_networks(Config.create(env=env, compute_dtype=dtype, **extra), spec)
        for dtype in ("float32", "bfloat16")
    }
    params = nets["float32"].init(jax.random.key(0))
    same = nets["bfloat16"].init(jax.random.key(0))
    assert jax.tree.all(
        jax.tree.map(lambda a, b: a.dtype == jnp.float32 and bool((a == b).all()), params, same)
    )
    obs = jax.random.normal(jax.random.key(1), (3, 16, *spec.obs_shape))  # [T, B, ...]
    first = jnp.zeros((3, 16), bool)

    def outputs(n, obs):
        if n.memory is None:
            dist, values = n.policy(params.policy, obs), n.value(params.value, obs)
        else:
            memory = n.memory.initial(16)
            dist, values = n.memory.joint_sequence(params, memory, obs, first)
        out = dist.logits if spec.discrete else dist.mean()
        return out, values

    (out32, v32), (out16, v16) = outputs(nets["float32"], obs), outputs(nets["bfloat16"], obs)
    for a, b in ((out16, out32), (v16, v32)):
        assert a.dtype == jnp.float32 and a.shape == b.shape
        assert not bool((a == b).all())  # rounded differently...
        np.testing.assert_allclose(
            a, b, rtol=0.05, atol=0.05 * float(jnp.abs(b).max())
        )  # ...a little
    hlo = {d: jax.jit(lambda o, n=n: outputs(n, o)).lower(obs).as_text() for d, n in nets.items()}
    assert "bf16" not in hlo["float32"]
    dots = [line for line in hlo["bfloat16"].splitlines() if "dot_general" in line]
    in_bf16 = [line for line in dots if re.search(r"xbf16>, tensor<\S+xbf16>\) -> ", line)]
    assert len(in_bf16) >= 4  # the two torsos' hidden layers at least
    if not extra:  # feed-forward: the heads too (with memory the cell and head are float32)
        assert len(in_bf16) == len(dots)


@pytest.mark.parametrize(
    "env, extra",
    [("CartPole-v1", {}), ("Pendulum-v1", {}), ("CartPole-v1", {"memory": "gru"})],
)
def test_layer_norm_makes_each_layer_blind_to_the_scale_of_its_pre_activations(env, extra):
    """With `layer_norm`, every hidden layer of both torsos has a LayerNorm, and scaling a
    layer's weights and bias by a positive constant leaves both networks' outputs unchanged
    (the normalisation divides it out); without it, the outputs move."""
    spec = make_env(env).spec
    obs = jax.random.normal(jax.random.key(1), (16, *spec.obs_shape))

    def outputs(layer_norm, scale):
        config = Config.create(env=env, hidden_sizes=[32, 32], layer_norm=layer_norm, **extra)
        nets = make_networks(config, spec)
        params = nets.init(jax.random.key(0))
        scaled = jax.tree_util.tree_map_with_path(
            lambda path, x: x * scale if "Dense_1" in jax.tree_util.keystr(path) else x, params
        )
        norms = [p for p, _ in jax.tree_util.tree_leaves_with_path(params)
                 if "LayerNorm" in jax.tree_util.keystr(p)]  # fmt: skip
        if nets.memory is None:
            dist, values = nets.policy(scaled.policy, obs), nets.value(scaled.value, obs)
        else:
            memory = nets.memory.initial(16)
            first = jnp.ones((16,), bool)
            _, dist = nets.memory.policy_step(scaled.policy, memory.policy, obs, first)
            _, values = nets.memory.value_step(scaled.value, memory.value, obs, first)
        return len(norms), np.asarray(dist.mean() if env == "Pendulum-v1" else dist.logits), values

    count, logits, values = outputs(True, 1.0)
    assert count == 2 * 2 * 2  # scale and offset of 2 layers, in the policy and the critic
    _, logits_scaled, values_scaled = outputs(True, 7.0)
    np.testing.assert_allclose(logits_scaled, logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(values_scaled, values, rtol=1e-4, atol=1e-5)

    count, logits, values = outputs(False, 1.0)
    assert count == 0
    _, logits_scaled, values_scaled = outputs(False, 7.0)
    assert np.abs(values_scaled - values).max() > 1e-2


@pytest.mark.parametrize("extra", [{}, {"memory": "gru"}])
@pytest.mark.parametrize("layer_norm, value_layer_norm", [(False, True), (True, False)])
def test_value_layer_norm_sets_the_critics_torso_alone(extra, layer_norm, value_layer_norm):
    """`value_layer_norm` puts layer norm in the critic's torso, or takes it out, whatever
    `layer_norm` does for the policy's (feed-forward and memory critics alike)."""
    spec = make_env("CartPole-v1").spec
    config = Config.create(env="CartPole-v1", hidden_sizes=[32, 32], layer_norm=layer_norm,
                           value_layer_norm=value_layer_norm, **extra)  # fmt: skip
    params = make_networks(config, spec).init(jax.random.key(0))

    def norms(tree):
        paths = jax.tree_util.tree_leaves_with_path(tree)
        return sum("LayerNorm" in jax.tree_util.keystr(p) for p, _ in paths)

    assert norms(params.policy) == (4 if layer_norm else 0)  # scale and offset of 2 layers
    assert norms(params.value) == (4 if value_layer_norm else 0)
