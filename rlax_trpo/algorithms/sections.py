"""Configuration groups that several algorithms read, to compose their own sections from.

An algorithm's section is a `Section` subclass inheriting the groups whose toolbox it uses
(`rlax_trpo.algorithms.common`) plus its own fields, and an `HParams` subclass likewise; both
are registered with it (`AlgorithmSpec`). A field's default is declared once, here or in the
algorithm's file; an algorithm may redeclare a group's field to give it its own default.
"""

from __future__ import annotations

from typing import Any, Literal

import flax.struct
from pydantic import Field, PositiveInt

from rlax_trpo.config.checks import ALWAYS_READ, read_with
from rlax_trpo.config.fields import ControlHParams, Section, hp_field

# ---------------------------------------------------------------- static fields


class OptimizerFields(Section):
    """The policy optimiser (`common.make_optimizer`, `common.anneal`)."""

    optimizer: Literal["adam", "sgd"] = "adam"
    adam_eps: float = Field(1e-5, gt=0)
    anneal_lr: bool = True  # learning rate decays linearly to 0 over the run

    read_only_with = {"adam_eps": read_with("optimizer", "adam")}


class AdvantageFields(Section):
    """Advantage estimation against a critic (`common.estimate_advantages`)."""

    advantage: Literal["gae", "mc", "nstep"] = "gae"
    n_step: int = Field(5, gt=0)  # with advantage: nstep
    normalize_advantages: bool = True
    value_hidden_sizes: tuple[PositiveInt, ...] | None = None  # critic (None: as the policy)
    value_layer_norm: bool | None = None  # critic's torso (None: as `layer_norm`)
    value_memory: Literal["none", "gru", "lstm"] | None = None  # critic (None: as the policy)

    read_only_with = {
        "n_step": read_with("advantage", "nstep"),
        "hp.gae_lambda": read_with("advantage", "gae"),
    }


class MinibatchFields(Section):
    """How a batch is cut into minibatches (`common.batch_layout`)."""

    shuffle: Literal["batch", "per_env"] = "batch"


class CriticFitterFields(MinibatchFields):
    """A separate critic fitted by Adam after the policy step (`common.make_critic_fitter`)."""

    adam_eps: float = Field(1e-5, gt=0)
    value_epochs: int = Field(10, gt=0)
    value_minibatches: int = Field(4, gt=0)

    read_only_with = {"adam_eps": ALWAYS_READ}  # the critic's Adam, whatever the policy's


# ---------------------------------------------------------------- hyperparameters


@flax.struct.dataclass
class OptimizerHParams(ControlHParams):
    learning_rate: Any = hp_field(2.5e-4, gt=0)
    max_grad_norm: Any = hp_field(0.5, gt=0)


@flax.struct.dataclass
class AdvantageHParams(ControlHParams):
    gae_lambda: Any = hp_field(0.95, ge=0, le=1)


@flax.struct.dataclass
class CriticFitterHParams(ControlHParams):
    value_learning_rate: Any = hp_field(1e-3, gt=0)
