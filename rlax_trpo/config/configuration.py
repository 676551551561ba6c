"""Configuration: the fields shared by every run, each algorithm's own section, and loading.

A configuration is the shared fields of its kind (`ControlFields`: environment, rollout width,
networks, normalisation, evaluation; `rlax_trpo.lm.config.LMFields` for language models) plus
the section of the algorithm it names: the static fields and the hyperparameters that algorithm
reads, declared in the algorithm's own file and registered with it (`rlax_trpo.algorithms`).
A key that the chosen algorithm does not read is an error naming the algorithms that do.

    config = Config.create(algorithm="trpo", env="Acrobot-v1", cg_iters=15)
    config.cg_iters, config.hp.max_kl          # static field, traceable hyperparameter

`Config` fixes shapes and loop lengths; frozen and hashable, it can close over a compiled
function. `config.hp` is the algorithm's `HParams` subclass: a pytree of float32 scalars that
can be traced, vmapped and swept. YAML files stay flat (`cg_iters: 15`, `hp: {max_kl: 0.02}`).
Every default is declared once, on its field: `Config.create()` is the default run (PPO on
CartPole-v1 with RL Zoo's tuned settings), the same as `rlax-trpo train` with no config.
Validation is pydantic's, on the host; a `ConfigError` names the key in one line.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import yaml
from pydantic import BaseModel, Field, create_model

from rlax_trpo.config import checks
from rlax_trpo.config.fields import (
    DEFAULT_ALGORITHM,
    HParams,
    hparams_model,
    validate_model,
)
from rlax_trpo.config.plugins import load_entry_points, load_plugins
from rlax_trpo.config.registry import algorithm_names, get_spec
from rlax_trpo.config.yamlio import merge_overrides, parse_overrides, read_yaml
from rlax_trpo.errors import ConfigError
from rlax_trpo.layers import check_network
from rlax_trpo.memory import memory_cells


class Config:
    """Frozen, hashable configuration of one run. Build with `Config.create(**fields)` or
    `load_config`.

    Attributes are the YAML keys of the run's kind and algorithm (`rlax-trpo configs --show
    NAME` lists them); `hp` holds the file's hyperparameters as the algorithm's `HParams`
    (float32 scalars, passed to `train` separately) and `spec` the algorithm's registry entry.
    """

    __slots__ = ("_model", "_spec")

    def __init__(self, model: BaseModel, spec: Any):
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_spec", spec)

    @classmethod
    def create(cls, **fields: Any) -> Config:
        """A validated configuration: the default run's fields with `fields` in their place
        (dotted `hp.x` keys not allowed: give `hp={...}`), as `config_from_dict` checks one."""
        return config_from_dict(fields)

    @property
    def spec(self) -> Any:
        """The algorithm's registry entry (`rlax_trpo.config.registry.AlgorithmSpec`)."""
        return self._spec

    @property
    def hp(self) -> HParams:
        return self._spec.hparams(
            **{k: jnp.float32(v) for k, v in self._model.hp.model_dump().items()}
        )

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._model, name)
        except AttributeError:
            if name.startswith("_"):
                raise
            raise UndeclaredField(
                f"{name}: algorithm {self._model.algorithm} reads a field it does not "
                f"declare; its registration lists the fields it reads "
                f"(register_algorithm(..., fields=...), docs/extending.md)"
            ) from None

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
        """Plain YAML-able dict (tuples become lists): what `config.yaml` holds."""
        return _plain(self._model.model_dump())


class UndeclaredField(ConfigError, AttributeError):
    """An algorithm's code reads a configuration field that its registry entry does not
    declare (`register_algorithm(..., fields=...)`): one line naming the field. An
    AttributeError too, so `getattr(config, name, default)` still works."""


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return [_plain(v) for v in x] if isinstance(x, (list, tuple)) else x


@functools.cache
def config_model(spec: Any) -> type[BaseModel]:
    """The pydantic model of a whole configuration: the kind's shared fields (`spec.base`),
    the algorithm's section (`spec.fields`) and its `hp:` section (`spec.hparams`)."""
    hp_model = hparams_model(spec.hparams)
    return create_model(
        f"{spec.fields.__name__}Config",
        __base__=model_bases(spec.fields, spec.base),
        hp=(hp_model, Field(default_factory=hp_model)),
    )


def model_bases(*classes: type) -> tuple[type, ...]:
    """`classes` without those another of them already derives from (or repeats), in order:
    bases a class can be made of. An algorithm registered without fields of its own has the
    bare `Section`, which the kind's shared fields already derive from."""
    kept: list[type] = []
    for cls in classes:
        if cls in kept or any(issubclass(other, cls) for other in classes if other is not cls):
            continue
        kept.append(cls)
    return tuple(kept)


def validate_config(raw: Any) -> tuple[BaseModel, Any]:
    """Validate a raw configuration mapping: import its plugins (`imports:`), look up its
    algorithm, refuse keys the algorithm does not read, check every value. Returns the
    validated model and the algorithm's spec; raises a one-line ConfigError."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping of keys, got {type(raw).__name__}")
    imports = raw.get("imports", ())
    if not isinstance(imports, (list, tuple)) or not all(isinstance(m, str) for m in imports):
        raise ConfigError(f"imports: expected a list of module names (got {imports!r})")
    load_entry_points()
    load_plugins(imports)
    name = raw.get("algorithm", DEFAULT_ALGORITHM)
    if not isinstance(name, str):
        raise ConfigError(f"algorithm: expected a name (got {name!r})")
    spec = get_spec(name)
    model_cls = config_model(spec)
    _check_keys(raw, name, model_cls, spec.hparams.names())
    model = validate_model(model_cls, raw)
    policy_cell, value_cell = memory_cells(model)
    if hasattr(model, "network"):
        memory = bool(policy_cell or value_cell)
        normalize = bool(getattr(model, "normalize_obs", False))
        check_network(model.network, model.network_kwargs, memory, normalize)
    if (policy_cell or value_cell) and not spec.memory:
        key = "memory" if policy_cell else "value_memory"
        raise ConfigError(
            f"{key}: algorithm {name} does not read memory networks' sequences "
            f"(registered without memory=True); use {key}=none"
        )
    return model, spec


def _check_keys(raw: dict, name: str, model_cls: type[BaseModel], hp_names: list[str]) -> None:
    """A key the algorithm does not read: one line naming who reads it, or the nearest key."""
    fields = [k for k in model_cls.model_fields if k != "hp"]
    for key in raw:
        if key not in model_cls.model_fields:
            hint = f"did you mean hp.{key}?" if key in hp_names else None
            near = difflib.get_close_matches(str(key), fields, n=1)
            near_hp = difflib.get_close_matches(str(key), hp_names, n=1)
            if hint is None and not near and near_hp:  # a misspelt hyperparameter
                hint = f"did you mean hp.{near_hp[0]}?"
            raise ConfigError(_not_read(str(key), name, fields, _readers(key, False), hint))
    hp = raw.get("hp")
    for key in hp if isinstance(hp, dict) else ():
        if key not in hp_names:
            hint = f"{key} is a static field: set it at the top level" if key in fields else None
            readers = _readers(key, True)
            raise ConfigError(
                _not_read(f"hp.{key}", name, [f"hp.{n}" for n in hp_names], readers, hint)
            )


def _not_read(key: str, name: str, allowed: list[str], readers: list[str], hint: str | None):
    if readers:
        return f"{key}: not read by algorithm {name}; read by {', '.join(readers)}"
    if hint is None:
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean {close[0]}?" if close else None
    if hint:
        return f"{key}: unknown key for algorithm {name} ({hint})"
    return f"{key}: unknown key; algorithm {name} reads: {', '.join(sorted(allowed))}"


def _readers(key: Any, hp: bool) -> list[str]:
    """The registered algorithms that read `key` (an `hp:` key when `hp`)."""
    readers = []
    for name in algorithm_names():
        try:
            spec = get_spec(name)
        except ConfigError:  # a plugin entry that does not import: not a reader
            continue
        names = spec.hparams.names() if hp else config_model(spec).model_fields
        if key in names and key != "hp":
            readers.append(name)
    return readers


def config_from_dict(raw: dict[str, Any]) -> Config:
    """A validated `Config` of any kind (control or `algorithm: grpo_lm`), with its host
    checks (environment names); a one-line ConfigError otherwise. Every configuration is
    made here: `Config.create`, `Config.replace`, `load_config` and the command line."""
    config = Config(*validate_config(raw))
    config.host_checks()
    return config


def raw_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    imports: Sequence[str] = (),
    base: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A configuration's raw mapping: `base`, else the YAML file or bundled name `path`, else
    nothing (the default run); then the `key=value` overrides, and `imports` added to the
    modules it imports itself."""
    layer = dict(base) if base is not None else read_yaml(path) if path is not None else {}
    given = parse_overrides(list(overrides))
    raw = _without_keys_made_unread(merge_overrides(layer, given), layer, given)
    if imports:
        raw["imports"] = list(dict.fromkeys([*raw.get("imports", []), *imports]))
    return raw


def _without_keys_made_unread(raw: dict, layer: dict, given: dict) -> dict:
    """`raw` without the keys of the file (or `base`) layer that an override made unread:
    `memory=none` on a config whose file sets `memory_size` drops it (it would do nothing).
    A key the overrides give, or one the file sets where it is already unread, stays, and
    validation refuses it in one line."""
    if not isinstance(layer, dict) or not given:
        return raw
    try:
        model_cls = config_model(get_spec(raw.get("algorithm", DEFAULT_ALGORITHM)))
    except (ConfigError, TypeError):  # validation says what is wrong with the algorithm
        return raw
    made_unread = checks.unread_in(raw, model_cls) - checks.unread_in(layer, model_cls)
    layer_hp = layer.get("hp") if isinstance(layer.get("hp"), dict) else {}
    for key in made_unread:
        name = key.removeprefix("hp.")
        in_layer = name in layer_hp if key.startswith("hp.") else key in layer
        if not in_layer or any(key == g or key.startswith(f"{g}.") for g in given):
            continue  # the user's own: refused
        if key.startswith("hp."):
            raw["hp"] = {k: v for k, v in raw["hp"].items() if k != name}
        else:
            del raw[key]
    return raw


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] | None = None,
    imports: Sequence[str] = (),
    base: dict[str, Any] | None = None,
) -> Config:
    """Config from a YAML file or bundled name (or the defaults: the default run), or from
    `base`, with `key=value` overrides and plugin `imports`, checked (`raw_config`)."""
    return config_from_dict(raw_config(path, overrides or (), imports, base))


def describe_sources(name: str, overrides: Sequence[str], imports: Sequence[str]) -> str:
    """A configuration resolved as YAML (`rlax-trpo configs --show NAME`): every field
    commented with where its value came from, the file, an override or the default."""
    from_file = {} if name == "default" else read_yaml(name)
    given = parse_overrides(list(overrides))
    config = load_config(None, overrides, imports, base=from_file)

    def source(dotted: str) -> str:
        if dotted in given or (dotted == "imports" and imports):
            return "override"
        node: Any = from_file
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return "default"
            node = node[part]
        return "file"

    flow = lambda key, value: yaml.safe_dump({key: value}, default_flow_style=True).strip()[1:-1]
    lines = [
        f"# {name}: algorithm {config.algorithm}; each value's source: file, override or default"
    ]
    for key, value in config.to_dict().items():
        if isinstance(value, dict) and value and key in ("hp", "model"):
            lines.append(f"{key}:")
            lines += [
                f"  {flow(sub, v):40s} # {source(f'{key}.{sub}')}" for sub, v in value.items()
            ]
        else:
            lines.append(f"{flow(key, value):42s} # {source(key)}")
    return "\n".join(lines) + "\n"
