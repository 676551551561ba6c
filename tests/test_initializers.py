"""The LAPACK-free orthogonal initialiser equals flax's, and network initialisation traces no
linear algebra.

A vmapped LAPACK QR (flax's orthogonal initialiser, one network per seed) deadlocks jaxlib's
CPU runtime (docs/upstream/cpu_qr_deadlock.md). tests/test_lowering.py lowers the vmapped init,
training and evaluation programs of every bundled config (every algorithm, the language model,
the physics suites) and asserts that none calls LAPACK on the CPU.
"""

import re
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import pytest

from rlax_trpo.config import config_from_dict, read_yaml
from rlax_trpo.experiment.program import make_program
from rlax_trpo.initializers import orthogonal

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
