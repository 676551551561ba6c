"""A user's networks, registered by name (a plugin module: `--import user_network`).

`one_layer` is a torso (the library puts its heads on it), `linear` a whole network (logits
or values straight from the observation), `bad_shape` a whole network whose policy gives one
output too many, `flat_dense` a torso that flattens what it is given (and notes its shape).
"""

import flax.linen as nn

import rlax_trpo


class OneLayer(nn.Module):
    width: int

    @nn.compact
    def __call__(self, obs):
        return nn.tanh(nn.Dense(self.width, name="user_layer")(obs))


class Linear(nn.Module):
    outputs: int  # 0: the critic's one value per observation

    @nn.compact
    def __call__(self, obs):
        out = nn.Dense(self.outputs or 1, name="user_linear")(obs)
        return out if self.outputs else out[..., 0]


class FlatDense(nn.Module):
    obs_rank: int

    @nn.compact
    def __call__(self, obs):
        flat = obs.reshape(obs.shape[: obs.ndim - self.obs_rank] + (-1,))
        return nn.relu(nn.Dense(8)(flat))


SEEN_SHAPES = []  # the observation shapes `flat_dense` was built for


def flat_dense(spec):
    SEEN_SHAPES.append(tuple(spec.obs_shape))
    return FlatDense(len(spec.obs_shape))


def one_layer(spec, width=32):
    return OneLayer(width)


def linear(spec, role):
    return Linear(spec.num_actions if role == "policy" else 0)


def bad_shape(spec, role):
    return Linear(spec.num_actions + 1 if role == "policy" else 0)


rlax_trpo.register_network("one_layer", one_layer)
rlax_trpo.register_network("linear", linear, outputs="heads")
rlax_trpo.register_network("bad_shape", bad_shape, outputs="heads")
rlax_trpo.register_network("flat_dense", flat_dense)
