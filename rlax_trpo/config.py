"""Static `Config` and vmappable `HParams`, and their loading from YAML and `key=value` overrides.

`Config` fixes shapes and loop lengths; frozen and hashable, it can close over a compiled
function. `HParams` is a pytree of float scalars that can be traced, vmapped and swept. Both
are validated by pydantic on the host; a `ConfigError` names the key in one line."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from pathlib import Path
from typing import Any, Literal

import flax.struct
import jax.numpy as jnp
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from rlax_trpo.defaults import find_config
from rlax_trpo.errors import ConfigError


def hp_field(default: float, **bounds: float) -> Any:
    """A hyperparameter field: its default and its pydantic bounds (gt, ge, lt, le)."""
    return dataclasses.field(default=default, metadata={"bounds": bounds})


@flax.struct.dataclass
class HParams:
    """Traceable float hyperparameters (the YAML `hp:` section); a pytree, so `jax.vmap` can
    sweep any of them. The one list of hyperparameters: `HParamsModel` is derived from it."""

    learning_rate: Any = hp_field(2.5e-4, gt=0)
    gamma: Any = hp_field(0.99, ge=0, le=1)
    gae_lambda: Any = hp_field(0.95, ge=0, le=1)
    clip_eps: Any = hp_field(0.2, gt=0)
    ent_coef: Any = hp_field(0.01, ge=0)
    vf_coef: Any = hp_field(0.5, ge=0)
    max_grad_norm: Any = hp_field(0.5, gt=0)
    value_clip_eps: Any = hp_field(0.2, gt=0)
    # Trust region (trpo / npg).
    max_kl: Any = hp_field(0.01, gt=0)
    damping: Any = hp_field(0.1, ge=0)
    line_search_decay: Any = hp_field(0.8, gt=0, lt=1)
    kl_slack: Any = hp_field(1.0, ge=1)
    cg_tol: Any = hp_field(1e-5, ge=0)  # CG stops at ||F s - g|| <= cg_tol ||g||
    value_learning_rate: Any = hp_field(1e-3, gt=0)
    # KL penalties (ppo kl_fixed / kl_adaptive, grpo).
    kl_beta: Any = hp_field(1.0, ge=0)
    kl_target: Any = hp_field(0.01, gt=0)
    # GRPO.
    clip_eps_low: Any = hp_field(0.2, gt=0)
    clip_eps_high: Any = hp_field(0.2, gt=0)
    std_floor: Any = hp_field(1e-6, gt=0)

    @classmethod
    def create(cls, **overrides: float) -> HParams:
        """HParams with defaults, validated, as float32 scalars."""
        return _hparams_from_model(validate_hparams(overrides))

    def replace(self, **updates: Any) -> HParams:  # noqa: D102 (documented by flax)
        return flax.struct.dataclasses.replace(self, **updates)


def hparams_model(hparams_cls: type, name: str) -> type[BaseModel]:
    """The pydantic model validating a hyperparameter section, derived from the fields (with
    their defaults and bounds) of a struct dataclass declared with `hp_field`."""
    return create_model(
        name,
        __config__=ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False),
        **{
            f.name: (float, Field(f.default, **f.metadata["bounds"]))
            for f in dataclasses.fields(hparams_cls)
        },
    )


HParamsModel = hparams_model(HParams, "HParamsModel")


class ConfigModel(BaseModel):
    """Validated static configuration (the YAML top level)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    algorithm: str = "ppo"  # a name in the algorithm registry (`rlax_trpo.algorithms`)
    env: str = "CartPole-v1"
    num_envs: int = Field(4, gt=0)
    num_steps: int = Field(128, gt=0)
    total_env_steps: int = Field(500_000, gt=0)
    num_epochs: int = Field(4, gt=0)
    num_minibatches: int = Field(4, gt=0)
    anneal_lr: bool = True
    shuffle: Literal["batch", "per_env"] = "batch"  # minibatches: see common.batch_layout
    clip_value_loss: bool = False
    optimizer: Literal["adam", "sgd"] = "adam"
    adam_eps: float = Field(1e-5, gt=0)
    # Advantage estimation.
    advantage: Literal["gae", "mc", "nstep"] = "gae"
    n_step: int = Field(5, gt=0)
    normalize_advantages: bool = True
    # Environment wrappers.
    normalize_obs: bool = False
    normalize_reward: bool = False
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    # Networks.
    network: Literal["auto", "mlp", "cnn"] = "auto"
    hidden_sizes: tuple[int, ...] = (64, 64)
    value_hidden_sizes: tuple[int, ...] | None = None
    activation: Literal["tanh", "relu"] = "tanh"
    # Trust region (trpo / npg) and critic fitting for critic-only updates.
    cg_iters: int = Field(10, gt=0)
    cg_solver: Literal["jax", "scan"] = "jax"  # jax.scipy's cg, or exactly cg_iters steps
    line_search_steps: int = Field(10, gt=0)
    fisher_fraction: float = Field(1.0, gt=0, le=1)
    value_epochs: int = Field(10, gt=0)
    value_minibatches: int = Field(4, gt=0)
    # PPO penalty form.
    penalty: Literal["clip", "kl_fixed", "kl_adaptive"] = "clip"
    # GRPO.
    group_size: int = Field(8, gt=0)
    group_advantage: Literal["grpo", "dr_grpo", "rloo"] = "grpo"
    group_normalizer: Literal["mean", "sqrt"] = "mean"
    std_ddof: int = Field(0, ge=0)
    per_step_returns: bool = False
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    ref_refresh_every: int = Field(0, ge=0)
    # Evaluation and logging.
    eval_episodes: int = Field(10, gt=0)
    hp: HParamsModel = Field(default_factory=HParamsModel)

    @field_validator("algorithm")
    @classmethod
    def _registered(cls, name: str) -> str:
        from rlax_trpo.algorithms import algorithm_names  # the registry imports no JAX

        if name not in algorithm_names():
            raise ValueError(f"unknown {name!r}; allowed: {', '.join(algorithm_names())}")
        return name

    @model_validator(mode="after")
    def _check_sizes(self) -> ConfigModel:
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches: {self.num_minibatches} does not divide the batch "
                f"num_envs x num_steps = {batch}; use a divisor of {batch}"
            )
        if self.total_env_steps < batch:
            raise ValueError(
                f"total_env_steps: {self.total_env_steps} is less than one iteration "
                f"(num_envs x num_steps = {batch})"
            )
        return self


def _hparams_from_model(model: Any) -> HParams:
    return HParams(**{k: jnp.float32(v) for k, v in model.model_dump().items()})


class Config:
    """Frozen, hashable static configuration. Build with `Config.create(**fields)` or `load_config`.

    Attributes mirror the YAML keys (see `ConfigModel`); `hp` holds the *default*
    hyperparameters of the file as an `HParams` (floats, passed to `train` separately)."""

    __slots__ = ("_model",)

    def __init__(self, model: ConfigModel):
        object.__setattr__(self, "_model", model)

    @classmethod
    def create(cls, **fields: Any) -> Config:
        return cls(_validate(ConfigModel, fields))

    def __getattr__(self, name: str) -> Any:
        if name == "hp":
            return _hparams_from_model(self._model.hp)
        return getattr(self._model, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is frozen; use config.replace(...)")

    def __hash__(self) -> int:
        return hash(yaml.safe_dump(self.to_dict(), sort_keys=True))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items() if k != "hp")
        return f"Config({fields})"

    def replace(self, **updates: Any) -> Config:
        """A new validated Config with some fields changed (dotted `hp.x` keys allowed)."""
        return Config.create(**merge_overrides(self.to_dict(), updates))

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML-able dict (tuples become lists)."""
        return _plain(self._model.model_dump())

    # Derived sizes used throughout the library.
    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_env_steps // self.batch_size


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return [_plain(v) for v in x] if isinstance(x, (list, tuple)) else x


def validate_hparams(data: dict[str, Any]) -> Any:
    """Validate an `hp:` mapping (`HParamsModel`); one-line ConfigError naming `hp.<key>`."""
    return _validate(HParamsModel, data, prefix="hp.")


def _validate(model_cls: type[BaseModel], data: dict[str, Any], prefix: str = "") -> Any:
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_one_line(err, prefix)) from None


def _one_line(err: ValidationError, prefix: str = "") -> str:
    first = err.errors()[0]
    key = prefix + ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        parent = first["loc"][:-1]
        if not prefix and not parent and first["loc"][-1] in HParamsModel.model_fields:
            return f"{key}: unknown key (did you mean hp.{key}?)"
        close = difflib.get_close_matches(str(first["loc"][-1]), _allowed_keys(parent), n=1)
        near = ".".join([*map(str, parent), close[0]]) if close else ""
        hint = f" (did you mean {prefix}{near}?)" if close else ""
        return f"{key}: unknown key{hint}; allowed keys: {', '.join(_allowed_keys(parent))}"
    if msg.startswith(f"{first['loc'][-1]}:") if first["loc"] else False:
        return msg  # model validators already name their key
    if not first["loc"]:
        return msg
    got = first.get("input")
    shown = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"{key}: {msg}{shown}"


def _allowed_keys(parent: tuple) -> list[str]:
    if parent == ("hp",):
        return sorted(HParamsModel.model_fields)
    return sorted(ConfigModel.model_fields)


def merge_overrides(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of `base` with dotted keys (`hp.learning_rate`) set to values."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Parse `key=value` strings; values are read as YAML scalars/lists (`[64,64]`, `true`)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key=value (e.g. hp.learning_rate=1e-3)")
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        if isinstance(value, str):
            value = _maybe_number(value)
        out[key.strip()] = value
    return out


def _maybe_number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    integral = value.is_integer() and "e" not in text.lower() and "." not in text
    return int(value) if integral else value


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from a file or a bundled config's name; a missing or malformed one
    raises a one-line ConfigError."""
    path = find_config(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {str(path)!r} is not valid YAML{where}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping of keys, not a {type(data).__name__}"
        )
    return data


# Configurations of another kind, by `algorithm:` -> "module:validate" (imported on use).
CONFIG_KINDS = {"grpo_lm": "rlax_trpo.lm.config:validate"}


def config_from_dict(raw: dict[str, Any]) -> Any:
    """A `Config`, or the config of another kind (`CONFIG_KINDS`, e.g. `algorithm: grpo_lm`),
    validated; a one-line ConfigError otherwise."""
    kind = CONFIG_KINDS.get(raw.get("algorithm")) if isinstance(raw, dict) else None
    if kind is None:
        return Config.create(**raw)
    module, _, attr = kind.partition(":")
    return getattr(importlib.import_module(module), attr)(raw)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Config from a YAML file or bundled name (or defaults) + `key=value` overrides, checked."""
    raw = read_yaml(path) if path is not None else {}
    raw = merge_overrides(raw, parse_overrides(overrides or []))
    config = Config.create(**raw)
    from rlax_trpo import envs, platform  # host-only name check, before any compilation

    platform.setup_cpu_for_run()  # the check imports gymnax, which starts JAX: the CPU first
    envs.check_env_name(config.env)
    return config
