"""The checks every configuration gets, whatever its kind and algorithm (`RunFields` runs them
once its fields are validated; a failure is one line naming the key):

- every number fits the type JAX computes with: an integer (a size, a count, a loop length,
  an `env_kwargs` value) fits int32 and a float float32, as do the products of fields a
  section declares (`Section.int32_products`, e.g. `num_envs x num_steps`); an integer only
  the host reads may be exempted (`Section.host_integers`);
- a field that does nothing without another (`Section.read_only_with`, e.g. `n_step` without
  `advantage: nstep`) is refused when its value differs from its default, while the default,
  as every saved config.yaml holds it, is accepted;
- `env_kwargs` are checked by building the environment once (`check_env_kwargs`, a host check).

This module imports nothing else of the package (but the environments, on use).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel

# JAX's own number types (64-bit types are off): loop lengths, counters, indices and integer
# environment parameters are int32; floats are float32.
INT32_MAX = int(np.iinfo(np.int32).max)
FLOAT32_MAX = float(np.finfo(np.float32).max)


class ReadWith(NamedTuple):
    """When a field is read: while `field` holds one of `values` (no values: while it is
    positive). Sections declare their conditional fields with `read_with`."""

    field: str
    values: tuple[Any, ...] = ()

    def holds(self, model: BaseModel) -> bool:
        value = getattr(model, self.field)
        return value in self.values if self.values else value > 0

    def __str__(self) -> str:
        if not self.values:
            return f"{self.field} > 0"
        shown = (str(v).lower() if isinstance(v, bool) else str(v) for v in self.values)
        return f"{self.field}: {' | '.join(shown)}"


def read_with(field: str, *values: Any) -> tuple[ReadWith, ...]:
    """The condition of `Section.read_only_with`: `field` holds one of `values` (none given:
    a positive number). Conditions of several sections on one key add up (either will do)."""
    return (ReadWith(field, values),)


ALWAYS_READ: tuple[ReadWith, ...] = ()  # in `read_only_with`: read whatever the others say


def declared(model_cls: type, name: str) -> Iterator[Any]:
    """`name`'s declarations by the classes of `model_cls`, most basic first."""
    for klass in reversed(model_cls.__mro__):
        if name in vars(klass):
            yield vars(klass)[name]


def check_numbers(model: BaseModel) -> None:
    """Every number of `model` and every declared product fits JAX's types; a ValueError
    naming the key otherwise."""
    host = {key for names in declared(type(model), "host_integers") for key in names}
    for key, value in _numbers(model, ""):
        problem = _does_not_fit(key, value, host)
        if problem:
            raise ValueError(problem)
    for table in declared(type(model), "int32_products"):
        for name, factors in table.items():
            sizes = [getattr(model, f) for f in factors]
            product = int(np.prod(sizes, dtype=object))
            if product > INT32_MAX:
                shown = " x ".join(map(str, sizes))
                raise ValueError(
                    f"{name}: {shown} = {product} does not fit int32 (JAX's integers: at most "
                    f"{INT32_MAX})"
                )


def _numbers(value: Any, key: str) -> Iterator[tuple[str, Any]]:
    """Every number (not a boolean) in a validated value, with its dotted key."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _numbers(getattr(value, name), f"{key}.{name}" if key else name)
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _numbers(item, f"{key}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{key}.{i}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield key, value


def _does_not_fit(key: str, value: Any, host_integers: set[str]) -> str | None:
    """Why `value` does not fit the type JAX computes `key` with, or None."""
    if isinstance(value, float) and abs(value) > FLOAT32_MAX:
        return f"{key}: {value!r} does not fit float32 (JAX's floats: at most 3.4e38 in size)"
    if isinstance(value, int) and key not in host_integers and abs(value) > INT32_MAX:
        return f"{key}: {value} does not fit int32 (JAX's integers: at most {INT32_MAX})"
    return None


def check_conditions(model: BaseModel) -> None:
    """No field of `read_only_with` holds another value than its default without its
    condition; a ValueError naming the field and the condition otherwise."""
    fields = type(model).model_fields
    for key, conditions in _conditions(type(model)).items():
        if not _changed(model, key):
            continue
        present = [c for c in conditions if c.field in fields] or list(conditions)
        if not any(c.field in fields and c.holds(model) for c in present):
            first, *others = present
            more = f" (or {' or '.join(map(str, others))})" if others else ""
            raise ValueError(f"{key}: read only with {first}{more}")


def unread_in(raw: dict[str, Any], model_cls: type[BaseModel]) -> set[str]:
    """The conditional keys a raw (unvalidated) mapping sets (`"hp.x"` for a hyperparameter)
    whose conditions all fail in it, its fields' defaults standing in for what it does not
    give. A value that cannot be compared counts as read (validation names it)."""
    fields = model_cls.model_fields
    hp = raw.get("hp") if isinstance(raw.get("hp"), dict) else {}

    def holds(c: ReadWith) -> bool:
        value = raw[c.field] if c.field in raw else fields[c.field].default
        try:
            return value in c.values if c.values else value > 0
        except TypeError:
            return True

    unread = set()
    for key, conditions in _conditions(model_cls).items():
        given = key.removeprefix("hp.") in hp if key.startswith("hp.") else key in raw
        present = [c for c in conditions if c.field in fields]
        if given and present and not any(holds(c) for c in present):
            unread.add(key)
    return unread


def _conditions(model_cls: type) -> dict[str, tuple[ReadWith, ...]]:
    """`read_only_with` merged over the classes of `model_cls`: each key's conditions; a key
    that a class reads unconditionally (`ALWAYS_READ`) has none."""
    merged: dict[str, tuple[ReadWith, ...] | None] = {}
    for table in declared(model_cls, "read_only_with"):
        for key, conditions in table.items():
            if conditions == ALWAYS_READ or merged.get(key, ()) is None:
                merged[key] = None
            else:
                merged[key] = (*merged.get(key, ()), *conditions)
    return {k: v for k, v in merged.items() if v is not None}


def _changed(model: BaseModel, key: str) -> bool:
    """Whether `key` (`"hp.x"` for a hyperparameter) holds another value than its default."""
    if key.startswith("hp."):
        model, key = getattr(model, "hp", None), key.removeprefix("hp.")
    fields = type(model).model_fields if model is not None else {}
    return key in fields and getattr(model, key) != fields[key].default


_ENV_KWARGS_CHECKED: set[str] = set()


def check_env_kwargs(env: str, env_kwargs: dict[str, Any]) -> None:
    """Build `env` with `env_kwargs` (once per process), so that their errors (an unknown
    parameter, a value of the wrong type or out of range) come from every path that makes a
    Config, as one-line ConfigErrors, before anything is compiled."""
    from rlax_trpo import envs

    key = json.dumps([env, env_kwargs], sort_keys=True, default=repr)
    if key not in _ENV_KWARGS_CHECKED:
        envs.make_env(env, env_kwargs)
        _ENV_KWARGS_CHECKED.add(key)
