"""Environments by name: single environments, and suites that own a `prefix/` of names.

    make_env("CartPole-v1")          gymnax (the default suite for names without a prefix)
    make_env("gymnax/CartPole-v1")   the same, explicitly
    make_env("MaxDigit-qa")          this library's own environments (`rlax_trpo.envs.own`)
    make_env("brax/hopper")          Brax; `playground/CartpoleBalance`: MuJoCo Playground's
                                     DM Control Suite; `jumanji/Snake-v1`: Jumanji;
                                     `craftax/Craftax-Symbolic-v1`: Craftax (extras)
    make_env("pomdp/CartPole-v1")    a gymnax task without its velocities (`envs.pomdp`)

A user adds one environment with `register_env(name, factory)` (the factory returns a
gymnax 1.0 `(environment, env_params)` pair, or an `Env`), or a whole suite with
`register_suite(prefix, make, names)`; see docs/extending.md. Built-in entries are named by
`"module:attribute"` strings and imported on first use, so importing this module imports no
environment library.
"""

from __future__ import annotations

import difflib
import importlib
import textwrap
from collections.abc import Callable
from typing import Any, NamedTuple

from rlax_trpo.envs.base import Env, check_action_mask
from rlax_trpo.errors import ConfigError

EnvFactory = Callable[[], Any]  # -> (gymnax environment, env_params) or Env


class Suite(NamedTuple):
    """`make(name, env_kwargs, flatten) -> Env` for names `prefix/<name>`; `names()` lists
    them (for error messages and `valid_env_names`)."""

    make: Callable[[str, dict[str, Any], bool], Env] | str
    names: Callable[[], list[str]] | str  # cheap: it lists names for every unknown one


_ENVS: dict[str, EnvFactory | str] = {"MaxDigit-qa": "rlax_trpo.envs.own:max_digit"}
_SUITES: dict[str, Suite] = {
    "gymnax": Suite("rlax_trpo.envs.gymnax_suite:make", "rlax_trpo.envs.gymnax_suite:names"),
    "brax": Suite("rlax_trpo.envs.brax_suite:make", "rlax_trpo.envs.brax_suite:names"),
    "playground": Suite(
        "rlax_trpo.envs.playground_suite:make", "rlax_trpo.envs.playground_suite:names"
    ),
    "jumanji": Suite("rlax_trpo.envs.jumanji_suite:make", "rlax_trpo.envs.jumanji_suite:names"),
    "craftax": Suite("rlax_trpo.envs.craftax_suite:make", "rlax_trpo.envs.craftax_suite:names"),
    "pomdp": Suite("rlax_trpo.envs.pomdp:make", "rlax_trpo.envs.pomdp:names"),
}
# suite -> the extra that installs it
EXTRAS = {"brax": "brax", "playground": "playground", "jumanji": "jumanji", "craftax": "craftax"}
DEFAULT_SUITE = "gymnax"  # names without a prefix that are not registered environments


def resolve(ref: Any) -> Any:
    """The object a `"module:attribute"` string names (imported now); anything else as is
    (the registries of environments, suites and algorithms name their entries so)."""
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        return getattr(importlib.import_module(module), attr)
    return ref


def register_env(name: str, factory: EnvFactory | str) -> None:
    """Register one environment under `name` (host-side; re-registering replaces it).

    `factory()` returns a gymnax 1.0 `(environment, env_params)` pair (adapted like gymnax's
    own environments; `env_kwargs` replace fields of `env_params`) or a ready `Env`.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"register_env: {name!r} must be a non-empty name without '/'")
    _ENVS[name] = factory


def register_suite(
    prefix: str,
    make: Callable[[str, dict[str, Any], bool], Env] | str,
    names: Callable[[], list[str]] | str,
) -> None:
    """Register a suite: `make(name, env_kwargs, flatten) -> Env` serves `prefix/<name>`."""
    if not isinstance(prefix, str) or not prefix or "/" in prefix:
        raise ValueError(f"register_suite: {prefix!r} must be a non-empty prefix without '/'")
    _SUITES[prefix] = Suite(make, names)


def env_names_by_suite() -> dict[str, list[str]]:
    """Each suite's names without their prefix (suites with none left out), then the single
    registered environments under "" (no suite)."""
    out = {prefix: resolve(suite.names)() for prefix, suite in _SUITES.items()}
    return {**{k: v for k, v in out.items() if v}, "": sorted(_ENVS)}


def valid_env_names() -> list[str]:
    """Every name `make_env` accepts (default-suite names without their prefix)."""
    return [
        name if prefix in ("", DEFAULT_SUITE) else f"{prefix}/{name}"
        for prefix, names in env_names_by_suite().items()
        for name in names
    ]


def _split_name(name: str) -> tuple[str | None, str]:
    """(suite prefix or None for a registered environment, the name within it)."""
    if name in _ENVS:
        return None, name
    prefix, sep, rest = name.partition("/")
    if sep and prefix in _SUITES:
        return prefix, rest
    return DEFAULT_SUITE, name


def check_env_name(name: str) -> None:
    """Raise a one-line ConfigError if `name` is unknown, naming the closest valid name and
    the command that lists them all (`env_listing`)."""
    prefix, rest = _split_name(name)
    if prefix is None:
        return
    known = resolve(_SUITES[prefix].names)()
    if rest in known:
        return
    if not known and prefix in EXTRAS:
        raise ConfigError(
            f"env: {name!r} needs the {prefix} suite (pip install 'rlax_trpo[{EXTRAS[prefix]}]')"
        )
    close = difflib.get_close_matches(name, valid_env_names(), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(
        f"env: unknown environment {name!r} ({hint}`rlax-trpo configs --envs` lists them all)"
    )


def env_listing() -> str:
    """`rlax-trpo configs --envs`: the valid environment names, one paragraph per suite."""
    lines = []
    for suite, names in env_names_by_suite().items():
        label = {DEFAULT_SUITE: f"{suite} (no prefix)", "": "registered"}.get(suite, f"{suite}/")
        lines.append(
            textwrap.fill(
                f"{label}: {', '.join(names)}",
                width=100,
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines) + "\n"


def make_env(name: str, env_kwargs: dict[str, Any] | None = None, flatten: bool = True) -> Env:
    """Build the `Env` registered under `name`.

    Args:
      name: a registered environment, `prefix/<name>` of a suite, or a gymnax name
        (`CartPole-v1`, `Breakout-MinAtar`, ...).
      env_kwargs: environment parameters to replace (e.g. `max_steps_in_episode`).
      flatten: flatten observations to vectors (MLP); False keeps images (CNN).
    """
    check_env_name(name)
    return check_action_mask(_build(name, dict(env_kwargs or {}), flatten))


def _build(name: str, kwargs: dict, flatten: bool) -> Env:
    prefix, rest = _split_name(name)
    if prefix is not None:
        return resolve(_SUITES[prefix].make)(rest, kwargs, flatten)
    made = resolve(_ENVS[name])()
    if isinstance(made, Env):
        if kwargs:
            raise ConfigError(f"env_kwargs: {name} is a ready Env and takes no env_kwargs")
        return made
    from rlax_trpo.envs.gymnax_suite import from_gymnax

    return from_gymnax(*made, name=name, env_kwargs=kwargs, flatten=flatten)
