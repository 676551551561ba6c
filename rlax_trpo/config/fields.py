"""The fields a configuration is made of: hyperparameter records (`HParams`), static-field
sections (`Section`), the fields of every run (`RunFields`) and of every control run
(`ControlFields`). Algorithms compose their own sections from these
(`rlax_trpo.algorithms.sections`); `rlax_trpo.config` assembles and validates a whole
configuration. This module imports nothing else of the package but its checks
(`rlax_trpo.config.checks`, which every configuration gets through `RunFields`), the ground
floor's PBT priors and, on use, the CPU setup and the environment check, so every algorithm
can declare its section here without an import cycle.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Annotated, Any, ClassVar, Literal

import flax.struct
import jax.numpy as jnp
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from rlax_trpo.config import checks
from rlax_trpo.config.checks import INT32_MAX, ReadWith, read_with
from rlax_trpo.errors import ConfigError
from rlax_trpo.pbt import PBTSettings, Prior

DEFAULT_ALGORITHM = "ppo"


def hp_field(default: float, **bounds: float) -> Any:
    """A hyperparameter field: its default and its pydantic bounds (gt, ge, lt, le)."""
    return dataclasses.field(default=default, metadata={"bounds": bounds})


@flax.struct.dataclass
class HParams:
    """Traceable float hyperparameters (the YAML `hp:` section); a pytree, so `jax.vmap` can
    sweep any of them. Each algorithm declares a subclass with the fields it reads (shared
    groups live in `rlax_trpo.algorithms.sections`); the pydantic model that validates `hp:` is
    derived from those fields, their defaults and their bounds (`hparams_model`)."""

    @classmethod
    def create(cls, **overrides: float) -> HParams:
        """This class's hyperparameters with defaults and `overrides`, validated, float32."""
        model = validate_model(hparams_model(cls), overrides, prefix="hp.")
        return cls(**{k: jnp.float32(v) for k, v in model.model_dump().items()})

    @classmethod
    def names(cls) -> list[str]:
        """The hyperparameter names, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    def replace(self, **updates: Any) -> HParams:  # noqa: D102 (documented by flax)
        return flax.struct.dataclasses.replace(self, **updates)


@flax.struct.dataclass
class ControlHParams(HParams):
    """The hyperparameters every control algorithm reads: the discount (the rollout's reward
    normalisation and every return estimator use it)."""

    gamma: Any = hp_field(0.99, ge=0, le=1)


_HPFloat = Annotated[float, BeforeValidator(lambda v: _not_a_boolean(v, float))]


@functools.cache
def hparams_model(hparams_cls: type) -> type[BaseModel]:
    """The pydantic model validating a hyperparameter section, derived from the fields (with
    their defaults and bounds) of a struct dataclass declared with `hp_field`."""
    return create_model(
        f"{hparams_cls.__name__}Model",
        __config__=ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False),
        **{
            f.name: (_HPFloat, Field(f.default, **f.metadata["bounds"]))
            for f in dataclasses.fields(hparams_cls)
        },
    )


class Section(BaseModel):
    """Base of every group of static fields: unknown keys, NaN/inf and booleans given for
    numbers are refused; frozen.

    Class attributes a section may declare (each merged over the classes a configuration is
    made of; `RunFields` checks them):
      read_only_with: `{key: read_with(field, *values)}`: `key` (`"hp.x"` for a
        hyperparameter) does nothing unless `field` holds one of `values`; a changed value
        without it is an error naming the field, the default is accepted. `ALWAYS_READ` (a
        section whose code reads the key in any case) overrides the others' conditions.
      int32_products: `{"a x b": ("a", "b")}`: products of fields that JAX holds in int32.
      host_integers: integer fields only the host reads (exempt from the int32 check).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    read_only_with: ClassVar[dict[str, tuple[ReadWith, ...]]] = {}
    int32_products: ClassVar[dict[str, tuple[str, ...]]] = {}
    host_integers: ClassVar[tuple[str, ...]] = ()

    @field_validator("*", mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        return _not_a_boolean(value, cls.model_fields[info.field_name].annotation)


def _not_a_boolean(value: Any, annotation: Any) -> Any:
    """`value`, unless it holds a boolean where `annotation` takes none (pydantic would read
    `num_envs: true` as 1)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(v, bool) for v in items) and bool not in _leaf_types(annotation):
        raise ValueError("expected a number, not a boolean")
    return value


def _leaf_types(annotation: Any) -> set:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return {type(a) for a in args}
    return set().union(*map(_leaf_types, args)) if args else {annotation}


class RunFields(Section):
    """Fields of every configuration, of any kind, and the checks every configuration gets
    (`rlax_trpo.config.checks`): numbers that fit JAX's types, conditional fields."""

    algorithm: str = DEFAULT_ALGORITHM  # a name in the algorithm registry
    # Modules imported before the config is validated (plugins that register algorithms,
    # environments or suites): names on the Python path or in the working directory, or
    # paths of .py files. Recorded in the run folder, so eval, resume and load_policy
    # import them again.
    imports: tuple[str, ...] = ()

    def host_checks(self) -> None:
        """Checks that need more than the values (e.g. that an environment exists)."""

    @model_validator(mode="after")
    def _checked(self) -> RunFields:
        checks.check_numbers(self)  # every number fits JAX's types
        checks.check_conditions(self)  # no field set that does nothing without another
        return self


class PBTSection(Section):
    """The `pbt:` section: population-based training inside the compiled run
    (`rlax_trpo.pbt`). The population is the run's seeds x settings; every `ready`
    iterations the lowest `fraction` of members copies a member of the highest `fraction`
    and explores each hyperparameter named in `explore` (`{name: "loguniform:LOW,HIGH"}` or
    `"uniform:LOW,HIGH"`): multiplied by one of `factors`, or with `resample_probability`
    drawn from its prior, clipped to the bounds. `init: prior` draws each member's starting
    values from the priors (else they are the config's and `--sweep`'s)."""

    explore: dict[str, str] = Field(min_length=1)
    ready: int = Field(10, gt=0)
    fraction: float = Field(0.25, gt=0, le=0.5)
    factors: tuple[float, ...] = Field((0.8, 1.25), min_length=1)
    resample_probability: float = Field(0.0, ge=0, le=1)
    init: Literal["config", "prior"] = "config"

    @field_validator("explore")
    @classmethod
    def _priors(cls, explore: dict[str, str]) -> dict[str, str]:
        for name, text in explore.items():
            try:
                Prior.parse(text)
            except ValueError as err:
                raise ValueError(f"pbt.explore.{name}: {err}") from None
        return explore

    @field_validator("factors")
    @classmethod
    def _positive(cls, factors: tuple[float, ...]) -> tuple[float, ...]:
        if any(not f > 0 for f in factors):
            raise ValueError(f"pbt.factors: {list(factors)} must all be positive")
        return factors

    def settings(self) -> PBTSettings:
        """The step's static settings."""
        priors = {name: Prior.parse(text) for name, text in self.explore.items()}
        return PBTSettings(priors, self.fraction, self.factors, self.resample_probability)

    def check_hparams(self, hp: BaseModel) -> None:
        """Each explored name is a hyperparameter of `hp` (a validated `hp:` section) whose
        bounds hold both ends of its prior; a ValueError naming the key otherwise."""
        fields = type(hp).model_fields
        for name, text in self.explore.items():
            if name not in fields:
                raise ValueError(
                    f"pbt.explore.{name}: not a hyperparameter of this algorithm (PBT explores "
                    f"hp: fields, traced in the compiled run: {', '.join(fields)})"
                )
            prior = Prior.parse(text)
            for end in (prior.low, prior.high):
                try:
                    type(hp)(**{name: end})
                except ValidationError as err:
                    reason = err.errors()[0]["msg"]
                    raise ValueError(
                        f"pbt.explore.{name}: the prior's bound {end:g} is outside hp.{name}'s "
                        f"range ({reason})"
                    ) from None


class ControlFields(RunFields):
    """Fields shared by every control algorithm: environment, rollout, networks,
    normalisation and evaluation. Defaults are those of the default run."""

    env: str = "CartPole-v1"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    num_envs: int = Field(8, gt=0)
    num_steps: int = Field(32, gt=0)
    total_env_steps: int = Field(200_000, gt=0, le=10**12)
    # Reset finished environments from a pool of num_envs / reset_ratio fresh states per step
    # (`rlax_trpo.rollout.pooled_step`); 1 = every environment resets on its own. For suites
    # whose reset costs many steps (Craftax, Jumanji's Maze).
    reset_ratio: int = Field(1, ge=1)
    # Enforce the environment's action mask where it gives one (`Env.action_mask`: Jumanji's,
    # a user's): only legal actions are sampled, scored and counted in entropy and KL. False:
    # every action is treated as legal (the mask, if any, stays in the observation).
    mask_actions: bool = True
    # Environment wrappers.
    normalize_obs: bool = False
    normalize_reward: bool = False
    # Networks.
    # auto (a CNN for images, else an MLP), mlp, cnn, or a registered network's name
    # (`rlax_trpo.layers.register_network`; `item_attention`, `grid` built in) with arguments.
    network: str = "auto"
    network_kwargs: dict[str, Any] = Field(default_factory=dict)
    hidden_sizes: tuple[PositiveInt, ...] = (64, 64)
    activation: Literal["tanh", "relu"] = "tanh"
    # Layer normalisation of every hidden layer's pre-activations (the torsos of the policy
    # and the critic; not the convolution, the memory cell or the heads).
    layer_norm: bool = False
    # The arithmetic of the networks' torsos and heads: bfloat16 halves the bytes their
    # activations move (parameters, optimiser, losses and advantages stay float32).
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    # Memory (rlax_trpo.memory): a GRU or LSTM cell between the torso and the policy's head.
    memory: Literal["none", "gru", "lstm"] = "none"
    memory_size: int = Field(128, gt=0)
    # Evaluation.
    eval_episodes: int = Field(10, gt=0)
    # Population-based training over the run's seeds x settings (`PBTSection`); none: off.
    pbt: PBTSection | None = None

    # memory_size is the width of a memory network's state, the policy's or the critic's
    read_only_with = {
        "memory_size": read_with("memory", "gru", "lstm") + read_with("value_memory", "gru", "lstm")
    }
    int32_products = {"num_envs x num_steps": ("num_envs", "num_steps")}
    host_integers = ("total_env_steps",)  # only its number of iterations reaches JAX

    @model_validator(mode="after")
    def _at_least_one_iteration(self) -> ControlFields:
        if self.total_env_steps < self.batch_size:
            raise ValueError(
                f"total_env_steps: {self.total_env_steps} is less than one iteration "
                f"(num_envs x num_steps = {self.batch_size})"
            )
        if self.num_iterations > INT32_MAX:
            raise ValueError(
                f"total_env_steps: {self.total_env_steps} is {self.num_iterations} iterations "
                f"of num_envs x num_steps = {self.batch_size} steps; JAX counts iterations in "
                f"int32 (at most {INT32_MAX})"
            )
        if self.num_envs % self.reset_ratio:
            raise ValueError(
                f"reset_ratio: {self.reset_ratio} does not divide num_envs = {self.num_envs}"
            )
        if self.pbt is not None and getattr(self, "hp", None) is not None:
            self.pbt.check_hparams(self.hp)
        return self

    def host_checks(self) -> None:
        """The environment's name, from each suite's snapshot of its names (nothing imported,
        no JAX backend started, no JAX setting changed); its `env_kwargs` by building it."""
        from rlax_trpo import envs, platform  # host-only, before any compilation

        envs.check_env_name(self.env)
        if self.env_kwargs:  # each suite checks its parameters as it builds the environment
            # Building it imports the suite's library, which starts JAX's backend: the host is
            # set up first as a run sets it up, or the run would find one CPU device.
            platform.setup_cpu_for_run()
            checks.check_env_kwargs(self.env, self.env_kwargs)

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of a run whose iteration spends its rollout's `num_envs x num_steps`
        env steps. An estimator that steps more (the vine's branches) runs fewer, so that
        budgets compare fairly: `Trainer.num_iterations` is every run's own count."""
        return self.total_env_steps // self.batch_size


def validate_model(model_cls: type[BaseModel], data: dict[str, Any], prefix: str = "") -> Any:
    """`model_cls` validated from `data`, or a one-line ConfigError naming the key."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_one_line(err, prefix)) from None


def _one_line(err: ValidationError, prefix: str = "") -> str:
    first = err.errors()[0]
    key = prefix + ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":  # nested sections (e.g. an LM model's keys)
        return f"{key}: unknown key"
    if first["loc"] and msg.startswith((f"{first['loc'][-1]}:", f"{key}:", f"{key}.")):
        return msg  # validators that already name their key
    if not first["loc"]:
        return msg
    got = first.get("input")
    shown = "" if isinstance(got, dict) or first["type"] == "missing" else f" (got {got!r})"
    return f"{key}: {msg}{shown}"
