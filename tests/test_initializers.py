"""The LAPACK-free orthogonal initialiser equals flax's, and no training program calls LAPACK.

A vmapped LAPACK QR (flax's orthogonal initialiser, one network per seed) deadlocks jaxlib's
CPU runtime (docs/cpu_qr_deadlock.md), so the audit below lowers the vmapped init and
training programs of every algorithm and of the language model and looks for LAPACK custom
calls (QR, SVD, Cholesky, eigh, LU all lower to `lapack_*` targets on CPU). Physics suites
call Cholesky and triangular solves in every step; with several CPU devices
`rlax_trpo.platform.setup_cpu` lowers those as plain HLO (docs/cpu_lapack_deadlock.md), so
their programs are audited whole too.
"""

import importlib.util
import re
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import pytest

from rlax_trpo.config import config_from_dict, read_yaml
from rlax_trpo.initializers import orthogonal
from rlax_trpo.program import make_program

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(4, 64), (64, 64), (64, 2), (900, 128), (3, 3, 4, 8), (2, 5)]


@pytest.mark.parametrize("shape", SHAPES)
def test_equals_flax_orthogonal(shape):
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    for seed in range(3):
        key = jax.random.key(seed)
        ours = np.asarray(orthogonal(np.sqrt(2))(key, shape)) / np.sqrt(2)
        theirs = np.asarray(nn.initializers.orthogonal(np.sqrt(2))(key, shape)) / np.sqrt(2)
        # The float64 QR of the same Gaussian draw, sign-corrected like jax's.
        z = np.asarray(jax.random.normal(key, (max(rows, cols), min(rows, cols))), np.float64)
        q, r = np.linalg.qr(z)
        q = q * np.sign(np.diag(r))
        exact = (q.T if rows < cols else q).reshape(shape)
        # float32 Gram-Schmidt: error grows with the draw's condition number (~750 for one
        # square 64x64 draw here, where it is 5.2e-7 on one CPU and under 5e-7 on another)
        assert np.abs(ours - exact).max() < (1e-6 if rows == cols else 5e-7)
        # flax's float32 QR is itself off by up to ~3e-6 on square draws (condition ~700)
        tol = 5e-6 if rows == cols else 5e-7
        assert np.abs(ours - theirs).max() < tol
        flat = ours.reshape(rows, cols)
        gram = flat.T @ flat if rows >= cols else flat @ flat.T
        np.testing.assert_allclose(gram, np.eye(min(rows, cols)), atol=1e-5)


def test_vmapped_equals_per_key():
    keys = jax.random.split(jax.random.key(1), 8)
    init = orthogonal(0.01)
    batched = jax.jit(jax.vmap(lambda k: init(k, (64, 64))))(keys)
    for i in range(8):
        np.testing.assert_allclose(batched[i], init(keys[i], (64, 64)), atol=1e-8)


def test_rejects_vectors():
    with pytest.raises(ValueError, match="rank >= 2"):
        orthogonal()(jax.random.key(0), (5,))


def _lapack_calls(fn, *args) -> set[str]:
    text = jax.jit(fn).lower(*args).as_text()
    return {t for t in re.findall(r"custom_call @(\w+)", text) if "lapack" in t}


# MuJoCo physics (Brax, Playground's MJX) factorises every env's mass matrix with a Cholesky
# and triangular solves; `platform.setup_cpu` (conftest) lowers those without LAPACK too.
# Both suites and both algorithms are audited on their cheapest model; the other physics
# configs run the same code on heavier models (lowering them takes about 100 s more).
# Craftax calls no linear algebra (its world generation's one jax.scipy call is a direct
# convolution); it is left out here, and test_lowering lowers ppo_craftax.
PHYSICS = {"brax/": "brax", "playground/": "mujoco_playground", "craftax/": "craftax"}
AUDITED_PHYSICS = ("ppo_brax_inverted_pendulum.yaml", "trpo_playground_cartpole_balance.yaml")
CONFIGS = sorted(
    p.name
    for p in (ROOT / "configs").glob("*.yaml")
    if "_lm_" not in p.name
    and (p.name in AUDITED_PHYSICS or not read_yaml(p).get("env", "").startswith(tuple(PHYSICS)))
)


@pytest.mark.parametrize("name", CONFIGS)
def test_training_programs_call_no_lapack(name):
    # every algorithm, the MLP and the CNN, Categorical and Gaussian policies, physics
    raw = read_yaml(ROOT / "configs" / name)
    module = next((m for k, m in PHYSICS.items() if raw.get("env", "").startswith(k)), None)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    _assert_program_lapack_free(config_from_dict(raw))


def test_language_model_program_calls_no_lapack():
    config = config_from_dict(read_yaml(ROOT / "configs" / "grpo_lm_max_digit.yaml"))
    _assert_program_lapack_free(config)


def _assert_program_lapack_free(config):
    program = make_program(config)
    keys = jax.random.split(jax.random.key(0), 2)
    hps = jax.tree.map(lambda x: np.stack([x, x]), program.hparams)
    init = jax.vmap(program.init)
    assert _lapack_calls(init, keys, hps) == set()
    state = jax.eval_shape(init, keys, hps)
    run = jax.vmap(lambda s, h: program.run(s, h, 1))
    assert _lapack_calls(run, state, hps) == set()
    assert _lapack_calls(jax.vmap(program.evaluate), state, keys) == set()


LINEAR_ALGEBRA = re.compile(
    r"\b(qr|geqrf|householder_product|cholesky|triangular_solve|lu|eigh|svd)\["
)


@pytest.mark.parametrize("name", ["ppo_cartpole", "trpo_cartpole", "ppo_breakout_minatar"])
def test_network_initialisation_traces_no_linear_algebra(name):
    """The initialiser itself, whatever the device count: with several CPU devices
    `platform.setup_cpu` lowers a QR without LAPACK, so the lowered text alone cannot show
    that flax's LAPACK-backed orthogonal initialiser came back; the traced program can."""
    program = make_program(config_from_dict(read_yaml(ROOT / "configs" / f"{name}.yaml")))
    keys = jax.random.split(jax.random.key(0), 2)
    hps = jax.tree.map(lambda x: np.stack([x, x]), program.hparams)
    text = str(jax.make_jaxpr(jax.vmap(program.init))(keys, hps))
    assert LINEAR_ALGEBRA.findall(text) == []


def test_the_linear_algebra_check_sees_flax_s_orthogonal_initialiser():
    text = str(jax.make_jaxpr(lambda k: nn.initializers.orthogonal()(k, (4, 4)))(jax.random.key(0)))
    assert LINEAR_ALGEBRA.findall(text)
