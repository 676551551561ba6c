"""The layers every network here is built from: orthogonally initialised dense layers, a 3x3
convolution as a dense layer on patches, and the torso (MLP, or CNN then MLP)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlax_trpo.initializers import orthogonal

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu}


def dense(features: int, gain: float, dtype: Any = jnp.float32) -> nn.Dense:
    """A dense layer with float32 parameters that computes in `dtype` (float32, or bfloat16
    with `compute_dtype: bfloat16`: inputs and weights rounded to bfloat16 for the product,
    gradients back to the float32 weights)."""
    return nn.Dense(
        features,
        kernel_init=orthogonal(gain),
        bias_init=nn.initializers.zeros,
        dtype=dtype,
        param_dtype=jnp.float32,
    )


def patches_3x3(x: jax.Array) -> jax.Array:
    """`[..., H, W, C]` -> `[..., H, W, 9 C]`: each pixel's zero-padded 3x3 neighbourhood.

    A Dense layer on these patches is a 3x3 'SAME' convolution with stride 1. We build it
    from slices because `nn.Conv` inside the training scan ran 35x slower on jaxlib 0.10's
    CPU backend (97 s against 2.8 s per Breakout-MinAtar PPO iteration, 128 envs x 128
    steps); for 10x10 MinAtar images the matmul form is cheap on every backend.
    """
    h, w = x.shape[-3], x.shape[-2]
    pad = [(0, 0)] * (x.ndim - 3) + [(1, 1), (1, 1), (0, 0)]
    xp = jnp.pad(x, pad)
    shifts = [xp[..., i : i + h, j : j + w, :] for i in range(3) for j in range(3)]
    return jnp.concatenate(shifts, axis=-1)


class Torso(nn.Module):
    """MLP on flat observations, or a small CNN (MinAtar: 10x10xC images) then an MLP; its
    activations are `dtype` (the observations are rounded to it first). With `layer_norm`,
    each MLP layer normalises its pre-activations over the features (Ba et al. 2016, with a
    learned scale and offset) before the nonlinearity."""

    hidden_sizes: Sequence[int]
    activation: str = "tanh"
    cnn: bool = False
    dtype: Any = jnp.float32
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        x = obs.astype(self.dtype)
        if self.cnn:  # a 3x3 'SAME' convolution
            x = nn.relu(dense(16, np.sqrt(2), self.dtype)(patches_3x3(x)))
            x = x.reshape(x.shape[:-3] + (-1,))
        for size in self.hidden_sizes:
            x = dense(size, np.sqrt(2), self.dtype)(x)
            if self.layer_norm:
                x = nn.LayerNorm(dtype=self.dtype, param_dtype=jnp.float32)(x)
            x = act(x)
        return x
