"""Population-based training's step (rlax_trpo.pbt): truncation selection copies whole
members bit for bit, exploration stays within the priors and follows the factors, the keys
decide the lineage, and a diverged member is replaced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_trpo.algorithms.ppo import PPOHParams
from rlax_trpo.pbt import PBTSettings, Prior, exploit_and_explore, ranking

P = 8
SETTINGS = PBTSettings(
    priors={"learning_rate": Prior(1e-5, 1e-2, log=True), "ent_coef": Prior(0.0, 0.1)},
    fraction=0.25,
    factors=(0.8, 1.25),
)


def _population(key):
    """Every kind of leaf a training state holds: float parameters, integer counters, PRNG
    keys, a recurrent carry, normaliser statistics."""
    k = jax.random.split(key, 4)
    state = {
        "params": {"w": jax.random.normal(k[0], (P, 3, 5)), "b": jax.random.normal(k[1], (P, 5))},
        "step": jnp.arange(P, dtype=jnp.int32) * 7,
        "key": jax.random.split(k[2], P),
        "memory": {"carry": jax.random.normal(k[3], (P, 4, 16), jnp.float32)},
        "normaliser": {"count": jnp.arange(P, dtype=jnp.float32) + 0.5},
    }
    lr = jnp.geomspace(1e-4, 1e-3, P).astype(jnp.float32)
    hps = jax.tree.map(lambda x: jnp.broadcast_to(x, (P,)), PPOHParams.create())
    return state, hps.replace(learning_rate=lr, ent_coef=jnp.linspace(0, 0.05, P))


def _leaves_equal(a, b) -> bool:
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_the_lowest_members_copy_a_top_member_bit_for_bit_and_the_rest_are_untouched():
    state, hps = _population(jax.random.key(0))
    fitness = jnp.array([5.0, 1.0, 7.0, 0.5, 9.0, 3.0, 8.0, 2.0])  # lowest: 3, 1; highest: 6, 4
    out = jax.jit(exploit_and_explore, static_argnums=4)(
        jax.random.key(1), state, hps, fitness, SETTINGS
    )
    parent = np.asarray(out.parent)
    copied = [i for i in range(P) if parent[i] != i]
    assert sorted(copied) == [1, 3]
    assert set(parent[copied]) <= {4, 6}
    for path, new in jax.tree_util.tree_leaves_with_path(out.state):
        old = _leaf(state, path)
        for i in range(P):
            assert _leaves_equal(new[i], old[parent[i]]), (jax.tree_util.keystr(path), i)
    for name in PPOHParams.names():
        new, old = np.asarray(getattr(out.hparams, name)), np.asarray(getattr(hps, name))
        keep = [i for i in range(P) if i not in copied]
        assert new[keep].tobytes() == old[keep].tobytes(), name
        if name not in dict(SETTINGS.priors):  # copied from the parent, unexplored
            assert new[copied].tobytes() == old[parent[copied]].tobytes(), name


def _leaf(tree, path):
    for entry in path:
        tree = tree[entry.key]
    return tree


def test_perturbation_multiplies_by_a_factor_within_the_bounds():
    state, hps = _population(jax.random.key(0))
    fitness = jnp.arange(P, dtype=jnp.float32)
    seen = set()
    for seed in range(20):
        out = exploit_and_explore(jax.random.key(seed), state, hps, fitness, SETTINGS)
        parent = np.asarray(out.parent)
        for i in np.flatnonzero(parent != np.arange(P)):
            for name, prior in SETTINGS.priors:
                new = float(getattr(out.hparams, name)[i])
                old = float(getattr(hps, name)[parent[i]])
                assert prior.low <= new <= prior.high, (name, new)
                candidates = [np.clip(np.float32(old) * np.float32(f), prior.low, prior.high)
                              for f in SETTINGS.factors]  # fmt: skip
                assert any(np.isclose(new, c, rtol=1e-6, atol=0) for c in candidates), (new, old)
                if name == "learning_rate":
                    seen.add(round(new / old, 4))
    assert seen == {0.8, 1.25}  # both factors drawn


def test_resampling_draws_from_the_prior_and_clipping_holds_the_bounds():
    state, hps = _population(jax.random.key(0))
    fitness = jnp.arange(P, dtype=jnp.float32)
    hps = hps.replace(ent_coef=jnp.full((P,), 0.1))  # at the top bound: x1.25 must be clipped
    resample = PBTSettings(priors=SETTINGS.priors, fraction=0.5, resample_probability=1.0)
    perturb = PBTSettings(priors=SETTINGS.priors, fraction=0.5)
    drawn, clipped = [], []
    for seed in range(25):
        key = jax.random.key(seed)
        a = exploit_and_explore(key, state, hps, fitness, resample)
        b = exploit_and_explore(key, state, hps, fitness, perturb)
        moved = np.asarray(a.parent) != np.arange(P)
        drawn += list(np.asarray(a.hparams.learning_rate)[moved])
        clipped += list(np.asarray(b.hparams.ent_coef)[moved])
    drawn = np.log10(drawn)
    assert len(drawn) == 100 and drawn.min() >= -5 and drawn.max() <= -2  # within the prior
    # log-uniform on [1e-5, 1e-2]: half the draws below 10**-3.5 (uniform: half below 5e-3)
    assert -4 < np.median(drawn) < -3, np.median(drawn)
    assert max(clipped) == pytest.approx(0.1) and min(clipped) == pytest.approx(0.08)


def test_the_same_key_gives_the_same_lineage_and_another_key_another():
    state, hps = _population(jax.random.key(0))
    fitness = jnp.arange(P, dtype=jnp.float32)[::-1]
    wide = PBTSettings(priors=SETTINGS.priors, fraction=0.5)
    a = exploit_and_explore(jax.random.key(3), state, hps, fitness, wide)
    b = exploit_and_explore(jax.random.key(3), state, hps, fitness, wide)
    assert np.array_equal(a.parent, b.parent)
    assert jax.tree.all(jax.tree.map(lambda x, y: _leaves_equal(x, y), a.hparams, b.hparams))
    others = [
        exploit_and_explore(jax.random.key(s), state, hps, fitness, wide) for s in range(4, 9)
    ]
    assert any(not np.array_equal(a.parent, o.parent) for o in others)


def test_a_diverged_member_ranks_last_and_is_replaced():
    state, hps = _population(jax.random.key(0))
    fitness = jnp.array([5.0, 1.0, jnp.nan, 0.5, 9.0, 3.0, 8.0, 2.0])
    assert list(np.asarray(ranking(fitness))[:2]) == [2, 3]
    out = exploit_and_explore(jax.random.key(0), state, hps, fitness, SETTINGS)
    assert int(out.parent[2]) in (4, 6)
    assert np.isfinite(np.asarray(out.state["params"]["w"][2])).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fraction": 0.6}, "fraction"),
        ({"fraction": 0.0}, "fraction"),
        ({"factors": ()}, "factors"),
        ({"factors": (0.8, -1.0)}, "factors"),
        ({"resample_probability": 1.5}, "resample_probability"),
        ({"priors": {"learning_rate": Prior(1e-2, 1e-4)}}, "learning_rate"),
        ({"priors": {"learning_rate": Prior(0.0, 1e-2, log=True)}}, "learning_rate"),
    ],
)
def test_settings_that_are_not_a_pbt_step_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PBTSettings(**{"priors": {}, **kwargs})
