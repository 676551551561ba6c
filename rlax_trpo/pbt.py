"""Population-based training's step (Jaderberg et al. 2017, "truncation selection" with
"perturb" and "resample" exploration), as a pure function of the population axis.

A population is any pytree whose leaves share a leading member axis: the training states of
a run's members, as `jax.vmap` builds them, and their hyperparameters (`HParams`, one float
per member and field). One step, given each member's fitness:

- **rank**: members are ordered by fitness; a member whose fitness is NaN (diverged, or no
  episode finished) ranks below every finite one;
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
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Prior(NamedTuple):
    """Where an explored hyperparameter may go: its bounds, and whether resampling draws
    uniformly in the logarithm (learning rates) or in the value."""

    low: float
    high: float
    log: bool = False


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
    u = jax.random.uniform(k_draw, value.shape, value.dtype)
    if prior.log:
        low, high = jnp.log(prior.low), jnp.log(prior.high)
        drawn = jnp.exp(low + u * (high - low))
    else:
        drawn = prior.low + u * (prior.high - prior.low)
    resample = jax.random.uniform(k_resample, value.shape) < settings.resample_probability
    return jnp.clip(jnp.where(resample, drawn, perturbed), prior.low, prior.high)
