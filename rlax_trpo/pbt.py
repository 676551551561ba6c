"""Population-based training's step (Jaderberg et al. 2017, "truncation selection" with
"perturb" and "resample" exploration), as a pure function of the population axis.

A population is any pytree whose leaves share a leading member axis: the training states of
a run's members, as `jax.vmap` builds them, and their hyperparameters (`HParams`, one float
per member and field). One step, given each member's fitness:

- **rank**: members are ordered by fitness; a member whose fitness is NaN (diverged, or not
  yet measured) ranks below every finite one;
- **exploit**: each of the `n = floor(fraction * P)` lowest-ranked members (at least one)
  copies the whole state and the hyperparameters of a member drawn uniformly from the `n`
  highest-ranked: every leaf, bit for bit (a gather along the member axis);
- **explore**: each copying member then changes each explored hyperparameter: with
  probability `resample_probability` it draws a new value from the field's prior (uniform,
  or log-uniform, between its bounds), otherwise it multiplies the copied value by one of
  `factors` drawn uniformly; the result is clipped to the bounds.

Members that do not copy keep their state and hyperparameters unchanged. The step returns
each member's parent (itself, or the member it copied), so a caller can record a lineage.
Everything is static but the arrays, so the step jits, and sharded over devices along the
member axis it gives the same result on any number of devices (a gather and elementwise
arithmetic; no reduction).

`population_run` puts the step inside a run: the population's iterations in one `lax.scan`,
every `ready` iterations a step ranked by the mean return of the episodes each member
finished since the last one; a member that finished none keeps the fitness it was last
ranked on (an agent whose episodes outlast a window is not taken for a failed one). Its
bookkeeping (`Carry`: each member's hyperparameters, its fitness window, its last fitness
and the step's key) lives in the training state, so a checkpoint holds it and a resumed run
takes the same steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Prior(NamedTuple):
    """Where an explored hyperparameter may go: its bounds, and whether resampling draws
    uniformly in the logarithm (learning rates) or in the value."""

    low: float
    high: float
    log: bool = False

    @classmethod
    def parse(cls, text: str) -> Prior:
        """`"loguniform:1e-4,1e-2"` or `"uniform:0,0.05"`; ValueError naming what is wrong."""
        kind, sep, bounds = str(text).partition(":")
        words = bounds.split(",")
        if not sep or kind.strip() not in ("uniform", "loguniform") or len(words) != 2:
            raise ValueError(
                f"{text!r} is not a prior (expected uniform:LOW,HIGH or loguniform:LOW,HIGH)"
            )
        try:
            low, high = (float(w) for w in words)
        except ValueError:
            raise ValueError(f"{text!r}: the bounds are not numbers") from None
        prior = cls(low, high, kind.strip() == "loguniform")
        if not (low < high and math.isfinite(low) and math.isfinite(high)) or (
            prior.log and low <= 0
        ):
            need = "0 < LOW < HIGH" if prior.log else "LOW < HIGH"
            raise ValueError(f"{text!r}: bounds {low:g}, {high:g} are not a prior ({need})")
        return prior

    def draw(self, key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
        """Uniform draws between the bounds, in the logarithm where `log`."""
        u = jax.random.uniform(key, shape, jnp.float32)
        if self.log:
            low, high = jnp.log(self.low), jnp.log(self.high)
            return jnp.clip(jnp.exp(low + u * (high - low)), self.low, self.high)
        return self.low + u * (self.high - self.low)


@dataclasses.dataclass(frozen=True)
class PBTSettings:
    """The static settings of the step.

    Attributes:
      priors: the explored hyperparameters by field name (a mapping, kept as sorted pairs so
        the settings hash as a static argument); the others are copied unchanged.
      fraction: the share of the population that copies, and that is copied from (0 < f <= 0.5).
      factors: the multipliers of "perturb", drawn uniformly.
      resample_probability: the chance that a field is drawn from its prior instead.
    """

    priors: Any  # Mapping[str, Prior] given; tuple[tuple[str, Prior], ...] kept
    fraction: float = 0.25
    factors: tuple[float, ...] = (0.8, 1.25)
    resample_probability: float = 0.0

    def __post_init__(self) -> None:
        pairs = self.priors.items() if hasattr(self.priors, "items") else self.priors
        object.__setattr__(self, "priors", tuple(sorted((n, Prior(*p)) for n, p in pairs)))
        if not 0 < self.fraction <= 0.5:
            raise ValueError(f"fraction: {self.fraction} is not in (0, 0.5]")
        if not self.factors or any(not f > 0 for f in self.factors):
            raise ValueError(f"factors: {self.factors} must be positive, at least one")
        if not 0 <= self.resample_probability <= 1:
            raise ValueError(f"resample_probability: {self.resample_probability} is not in [0, 1]")
        for name, prior in self.priors:
            if not prior.low < prior.high or (prior.log and not prior.low > 0):
                raise ValueError(f"{name}: bounds {prior.low}, {prior.high} are not a prior")

    def copies(self, population: int) -> int:
        """How many members copy (and how many are copied from) in a population of this size."""
        return max(1, int(self.fraction * population))


class Step(NamedTuple):
    state: Any  # the population's states after the step
    hparams: Any  # and their hyperparameters
    parent: jax.Array  # int32[P]: the member each copied (its own index if it did not)


def ranking(fitness: jax.Array) -> jax.Array:
    """Member indices from the lowest fitness to the highest, NaN lowest of all (ties keep
    the order of the members)."""
    finite = jnp.where(jnp.isnan(fitness), -jnp.inf, fitness)
    return jnp.argsort(finite, stable=True)


def exploit_and_explore(
    key: jax.Array, state: Any, hparams: Any, fitness: jax.Array, settings: PBTSettings
) -> Step:
    """One PBT step over a population of `P = fitness.shape[0]` members (see the module)."""
    population = fitness.shape[0]
    n = settings.copies(population)
    order = ranking(fitness)
    bottom, top = order[:n], order[population - n :]
    k_source, k_explore = jax.random.split(key)
    source = top[jax.random.randint(k_source, (n,), 0, n)]
    parent = jnp.arange(population, dtype=jnp.int32).at[bottom].set(source.astype(jnp.int32))
    copied = parent != jnp.arange(population)
    take = lambda x: jnp.take(x, parent, axis=0)  # noqa: E731 (a gather per leaf)
    new_state, new_hparams = jax.tree.map(take, state), jax.tree.map(take, hparams)
    updates = {}
    for i, (name, prior) in enumerate(settings.priors):
        value = getattr(new_hparams, name)
        explored = _explore(jax.random.fold_in(k_explore, i), value, prior, settings)
        updates[name] = jnp.where(copied, explored, value).astype(value.dtype)
    return Step(new_state, new_hparams.replace(**updates), parent)


def _explore(key: jax.Array, value: jax.Array, prior: Prior, settings: PBTSettings) -> jax.Array:
    """Every member's explored value (the caller keeps it only where the member copied)."""
    k_factor, k_resample, k_draw = jax.random.split(key, 3)
    factors = jnp.asarray(settings.factors, value.dtype)
    perturbed = value * factors[jax.random.randint(k_factor, value.shape, 0, len(factors))]
    drawn = prior.draw(k_draw, value.shape).astype(value.dtype)
    resample = jax.random.uniform(k_resample, value.shape) < settings.resample_probability
    return jnp.clip(jnp.where(resample, drawn, perturbed), prior.low, prior.high)


class Carry(NamedTuple):
    """What a member of a PBT run carries in its training state (`TrainState.pbt`)."""

    hparams: Any  # the member's own hyperparameters (what it trains with)
    return_sum: jax.Array  # returns of the episodes it finished since the last step
    episodes: jax.Array  # and their number
    key: jax.Array  # the next step's key (every member holds the same after a step)
    fitness: jax.Array  # what the last step ranked it on (NaN before its first measure)


def initial_carry(key: jax.Array, hparams: Any, settings: PBTSettings, from_prior: bool) -> Carry:
    """A member's carry at the start: its configured hyperparameters, or with `from_prior`
    each explored one drawn from its prior."""
    k_step, k_draw = jax.random.split(key)
    if from_prior:
        draws = {
            name: prior.draw(jax.random.fold_in(k_draw, i)).astype(getattr(hparams, name).dtype)
            for i, (name, prior) in enumerate(settings.priors)
        }
        hparams = hparams.replace(**draws)
    zero = jnp.zeros((), jnp.float32)
    return Carry(hparams, zero, zero, k_step, jnp.full((), jnp.nan, jnp.float32))


def population_run(iteration: Callable, settings: PBTSettings, ready: int) -> Callable:
    """`run(state [P], hp, num_iterations) -> (state, metrics [P, num_iterations])`: the
    members' `iteration(state, hp) -> (state, metrics)` vmapped in one `lax.scan`, each with
    its own hyperparameters (`state.pbt.hparams`; `hp` is not read), and a PBT step after
    every iteration that is a multiple of `ready`. The state is a training state with the
    fields `pbt` (a `Carry`), `iteration`, `diverged_at` and `key`.

    Fitness is the mean return of the episodes a member finished since the last step, or
    the fitness it was last ranked on where it finished none (NaN, ranked last, for a
    diverged member or one never measured; `population_step`). A
    member that copies takes its parent's training key folded with its own index, so parent
    and child do not act on the same random numbers. Metrics added per iteration:
    `pbt/parent` (the member each copied at a step, else its own index) and `hp/NAME`, each
    explored value used.
    """

    def body(state: Any, _: None) -> tuple[Any, dict[str, jax.Array]]:
        used = state.pbt.hparams
        state, metrics = jax.vmap(iteration)(state, used)
        carry = state.pbt
        state = state.replace(
            pbt=carry._replace(
                return_sum=carry.return_sum + metrics["episode/return_sum"],
                episodes=carry.episodes + metrics["episode/count"],
            )
        )
        members = jnp.arange(state.iteration.shape[0], dtype=jnp.int32)
        due = state.iteration[0] % ready == 0
        step = functools.partial(population_step, settings=settings)
        state, parent = jax.lax.cond(due, step, lambda s: (s, members), state)
        metrics["pbt/parent"] = parent.astype(jnp.float32)
        for name, _prior in settings.priors:
            metrics[f"hp/{name}"] = getattr(used, name).astype(jnp.float32)
        return state, metrics

    def run(state: Any, hp: Any, num_iterations: int) -> tuple[Any, dict[str, jax.Array]]:
        del hp  # each member trains with its own, `state.pbt.hparams`
        state, metrics = jax.lax.scan(body, state, None, length=num_iterations)
        return state, jax.tree.map(lambda m: jnp.moveaxis(m, 0, 1), metrics)

    return run


def population_step(state: Any, settings: PBTSettings) -> tuple[Any, jax.Array]:
    """The PBT step of `population_run` on a training state `[P]`: `(state, parent)`.

    Fitness is each member's mean return over its window; a member that finished no episode
    in it keeps the fitness of its last step (its episodes may simply be longer than a
    window: 1,000-step episodes that end only at their time limit, every environment reset
    together, against 512 steps between steps), and a diverged member has NaN. The step's
    key is member 0's carry key, split, and every member carries the same next key after
    it. A member that copies takes every leaf of its parent but two: its training key, the
    parent's folded with its own index, and its carry (explored hyperparameters, an empty
    window, the parent's fitness). Every window starts again.
    """
    carry, members = state.pbt, jnp.arange(state.iteration.shape[0], dtype=jnp.int32)
    measured = carry.return_sum / jnp.maximum(carry.episodes, 1)
    fitness = jnp.where(carry.episodes > 0, measured, carry.fitness)
    fitness = jnp.where(state.diverged_at < 0, fitness, jnp.nan)
    key, k_step = jax.random.split(carry.key[0])
    out = exploit_and_explore(k_step, state, carry.hparams, fitness, settings)
    copied = out.parent != members
    rekeyed = jax.vmap(jax.random.fold_in)(out.state.key, members)
    train_key = _select_keys(copied, rekeyed, out.state.key)
    zeros = jnp.zeros_like(carry.return_sum)
    keys = jax.random.wrap_key_data(
        jnp.broadcast_to(jax.random.key_data(key), jax.random.key_data(carry.key).shape)
    )
    new = out.state.replace(
        key=train_key, pbt=Carry(out.hparams, zeros, zeros, keys, fitness[out.parent])
    )
    return new, out.parent


def _select_keys(which: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """Typed PRNG keys `[P]`: `a` where `which`, else `b`."""
    a, b = jax.random.key_data(a), jax.random.key_data(b)
    which = which.reshape(which.shape + (1,) * (a.ndim - 1))
    return jax.random.wrap_key_data(jnp.where(which, a, b))
