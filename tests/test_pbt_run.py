"""Population-based training inside a training run (`pbt:`, `rlax_trpo.pbt.population_run`):
the step every `ready` iterations on each member's fitness window, a whole training state
copied (memory included), a diverged member replaced, the best agent's history in the
summary, the same metrics after a kill and `--resume`, every control algorithm."""

from __future__ import annotations

import csv
import json
import shutil
import signal
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_pbt import _leaves_equal
from test_resume import _AlreadySignalled

import train
from rlax_trpo import Config, load_policy, make_trainer
from rlax_trpo.experiment import checkpoint, driver
from rlax_trpo.pbt import Prior, population_run, population_step

# 12 iterations, a step after every third; 2 of 4 members copy
EXPLORE = ["pbt.explore.learning_rate=loguniform:1e-4,1e-2", "pbt.explore.ent_coef=uniform:0,0.05"]
RUN = [
    "--seeds",
    "4",
    "--no-progress",
    "num_envs=4",
    "num_steps=16",
    "total_env_steps=768",
    "num_epochs=1",
    "num_minibatches=2",
    "eval_episodes=2",
    *EXPLORE,
    "hp.ent_coef=0.01",
    "pbt.ready=3",
    "pbt.fraction=0.5",
]
READY, COPIES = 3, 2


def _columns(run: Path) -> dict[str, np.ndarray]:
    """metrics.csv as `[member, iteration]` arrays (rows are member-major)."""
    with (run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    members = 1 + max(int(r["seed"]) for r in rows)
    return {k: np.array([float(r[k]) for r in rows]).reshape(members, -1) for k in rows[0]}


@pytest.fixture(scope="module")
def pbt_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pbt") / "whole"
    assert train.main([*RUN, "--out", str(out)]) == 0
    return out


def test_a_run_steps_every_ready_iterations_on_the_fitness_of_its_window(pbt_run):
    m = _columns(pbt_run)
    parent, (members, iterations) = m["pbt/parent"].astype(int), m["pbt/parent"].shape
    own = np.arange(members)
    window_start, last = 0, np.full(members, -np.inf)  # the fitness each was last ranked on
    for t in range(iterations):
        copied = np.flatnonzero(parent[:, t] != own)
        if (t + 1) % READY:
            assert copied.size == 0, t  # no step between the ready iterations
            continue
        assert copied.size == COPIES, (t, parent[:, t])
        span = slice(window_start, t + 1)  # the episodes each member finished since the last step
        count = m["episode/count"][:, span].sum(1)
        measured = m["episode/return_sum"][:, span].sum(1) / np.maximum(count, 1)
        fitness = np.where(count > 0, measured, last)
        kept = np.setdiff1d(own, copied)
        assert fitness[copied].max() <= fitness[kept].min(), (t, fitness, copied)
        assert fitness[parent[copied, t]].min() >= np.sort(fitness)[-COPIES], (t, fitness)
        window_start, last = t + 1, fitness[parent[:, t]]
        if t + 1 == iterations:
            continue
        for name, prior in SETTINGS_OF_RUN:
            now, then = m[f"hp/{name}"][:, t + 1], m[f"hp/{name}"][:, t]
            np.testing.assert_array_equal(now[kept], then[kept])  # the others keep theirs
            for i in copied:  # a copy explores its parent's value: one factor, clipped
                candidates = [np.clip(then[parent[i, t]] * f, prior.low, prior.high)
                              for f in (0.8, 1.25)]  # fmt: skip
                assert any(np.isclose(now[i], c, rtol=1e-5) for c in candidates), (name, t, i)


SETTINGS_OF_RUN = (("learning_rate", Prior(1e-4, 1e-2, True)), ("ent_coef", Prior(0.0, 0.05)))


def test_the_summary_names_the_best_member_and_load_policy_loads_it(pbt_run):
    summary = json.loads((pbt_run / "summary.json").read_text())
    pbt = summary["pbt"]
    finals = [m for member in summary["members"] for m in member["final_return_per_seed"]]
    assert pbt["best_member"] == int(np.nanargmax(finals))
    assert pbt["steps"] == 4 and set(pbt["schedule"]) == {"learning_rate", "ent_coef"}
    # the schedule is the best agent's own history, followed back through its parents
    m = _columns(pbt_run)
    parent = m["pbt/parent"].astype(int)
    holder, member, held = dict(pbt["lineage"]), None, []
    for t in range(parent.shape[1]):
        member = holder.get(t, member)
        held.append(member)
        for name, changes in pbt["schedule"].items():
            value = [v for it, v in changes if it <= t][-1]
            assert value == pytest.approx(m[f"hp/{name}"][member, t], rel=1e-6), (name, t)
    # the member holding the agent after iteration t held it as the copy of the one before
    for t in range(parent.shape[1]):
        after = held[t + 1] if t + 1 < len(held) else pbt["best_member"]
        assert parent[after, t] == held[t], (t, held)
    assert load_policy(pbt_run).member == pbt["best_member"]
    assert load_policy(pbt_run, member=0).member == 0
    assert (pbt_run / "pbt.png").stat().st_size > 10_000  # every member and the best agent


def test_load_policy_loads_the_member_the_summary_names(pbt_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(pbt_run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    for best in (1, 3):
        summary["pbt"]["best_member"] = best
        (copy / "summary.json").write_text(json.dumps(summary))
        assert load_policy(copy).member == best
    del summary["pbt"]  # a run without PBT: member 0
    (copy / "summary.json").write_text(json.dumps(summary))
    assert load_policy(copy).member == 0


def test_a_killed_and_resumed_pbt_run_writes_the_same_metrics(pbt_run, tmp_path, monkeypatch):
    # stopped after its first call (iteration 1), steps every 3: a fitness window spans the
    # checkpoint it resumes from
    parts = tmp_path / "parts"
    with monkeypatch.context() as m:
        m.setattr(driver, "StopRequest", _AlreadySignalled)
        code = train.main([*RUN, "--chunk-iterations", "2", "--out", str(parts)])
    assert code == 128 + signal.SIGTERM
    assert checkpoint.read_record(parts / "checkpoint").iterations_done == 1
    assert train.main(["--resume", str(parts), "--no-progress"]) == 0
    assert (parts / "metrics.csv").read_bytes() == (pbt_run / "metrics.csv").read_bytes()


# A PBT run stopped after iteration 3 (one step taken) by the release whose carry had no
# `fitness` (tests/data/pbt_before_fitness; made with RUN and `--chunk-iterations 3`).
BEFORE_FITNESS = Path(__file__).parent / "data" / "pbt_before_fitness" / "stopped_after_iteration_3"


def test_a_pbt_run_saved_before_the_carried_fitness_resumes_to_the_same_metrics(pbt_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(BEFORE_FITNESS, run)
    assert train.main(["--resume", str(run), "--no-progress"]) == 0
    a, b = _columns(run), _columns(pbt_run)
    assert a.keys() == b.keys() and a["pbt/parent"].shape == b["pbt/parent"].shape == (4, 12)
    for name in a:
        if name in ("seed", "iteration", "env_steps", "episode/count", "pbt/parent"):
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        else:  # the first chunk came from the old release's programs: equal to rounding
            np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-6, err_msg=name)


def _train_state_population(config, members: int):
    trainer = make_trainer(config)
    keys = jax.random.split(jax.random.key(0), members)
    hps = jax.tree.map(lambda x: jnp.broadcast_to(x, (members,)), config.hp)
    return jax.vmap(trainer.init)(keys, hps)


def test_the_step_copies_a_training_state_with_memory_bit_for_bit_and_replaces_a_diverged_one():
    config = Config.create(
        num_envs=4, num_steps=8, memory="gru", memory_size=8, normalize_obs=True,
        pbt={"explore": {"learning_rate": "loguniform:1e-4,1e-2"}, "fraction": 0.5},
    )  # fmt: skip
    state = _train_state_population(config, 4)
    state = state.replace(
        params=jax.tree.map(
            lambda x: x + jnp.arange(4.0).reshape((4,) + (1,) * (x.ndim - 1)), state.params
        ),  # fmt: skip (members told apart by every leaf)
        pbt=state.pbt._replace(
            return_sum=jnp.array([40.0, 90.0, 10.0, 300.0]),  # fitness 20, 30, 10, 100
            episodes=jnp.array([2.0, 3.0, 1.0, 3.0]),
        ),
        diverged_at=jnp.array([-1, -1, -1, 5], jnp.int32),  # the fittest member diverged
    )
    settings = config.pbt.settings()
    new, parent = jax.jit(population_step, static_argnums=1)(state, settings)
    parent = np.asarray(parent)
    # ranked: 3 (diverged) < 2 (10) < 0 (20) < 1 (30): 3 and 2 copy 0 or 1
    assert list(parent[:2]) == [0, 1] and set(parent[2:]) <= {0, 1}
    assert int(new.diverged_at[3]) == -1  # the diverged member trains again, from a healthy one
    leaves_old = jax.tree_util.tree_leaves_with_path(state.replace(key=None, pbt=None))
    leaves_new = dict(jax.tree_util.tree_leaves_with_path(new.replace(key=None, pbt=None)))
    assert any("memory" in jax.tree_util.keystr(path) for path, _ in leaves_old)
    for path, old in leaves_old:
        for i in range(4):
            assert _leaves_equal(leaves_new[path][i], old[parent[i]]), (
                jax.tree_util.keystr(path),
                i,
            )
    for i in range(4):  # a copy acts on its own random numbers
        expected = state.key[i] if parent[i] == i else jax.random.fold_in(state.key[parent[i]], i)
        assert _leaves_equal(new.key[i], expected), i
    assert not np.asarray(new.pbt.return_sum).any() and not np.asarray(new.pbt.episodes).any()
    carried = jax.random.key_data(new.pbt.key)
    assert (carried == carried[0]).all()  # every member holds the next step's key
    assert not (carried[0] == jax.random.key_data(state.pbt.key[0])).all()  # a new one
    lr, old_lr = (
        np.asarray(new.pbt.hparams.learning_rate),
        np.asarray(state.pbt.hparams.learning_rate),
    )
    assert lr[:2].tobytes() == old_lr[:2].tobytes()
    for i in (2, 3):
        assert any(np.isclose(lr[i], old_lr[parent[i]] * f) for f in (0.8, 1.25)), (i, lr)


def test_a_member_that_finished_no_episode_keeps_its_last_fitness():
    """An agent whose episodes outlast a window (1,000 steps that end only at the time limit,
    512 steps between steps) is ranked on the fitness of its last step, not a failed one's;
    a copy carries its parent's fitness, and a member never measured ranks last."""
    config = Config.create(
        num_envs=4, num_steps=8,
        pbt={"explore": {"learning_rate": "loguniform:1e-4,1e-2"}, "fraction": 0.5},
    )  # fmt: skip
    state = _train_state_population(config, 4)
    assert np.isnan(np.asarray(state.pbt.fitness)).all()  # no member measured at the start
    state = state.replace(
        pbt=state.pbt._replace(
            return_sum=jnp.array([40.0, 0.0, 10.0, 0.0]),  # windows: 20, none, 10, none
            episodes=jnp.array([2.0, 0.0, 1.0, 0.0]),
            fitness=jnp.array([5.0, 50.0, jnp.nan, jnp.nan]),  # 0's window replaces its 5
        )
    )
    new, parent = jax.jit(population_step, static_argnums=1)(state, config.pbt.settings())
    parent = np.asarray(parent)
    # ranked: 3 (never measured) < 2 (10) < 0 (20) < 1 (50, kept from its last step)
    assert list(parent[:2]) == [0, 1] and set(parent[2:]) <= {0, 1}, parent
    expected = np.array([20.0, 50.0, 0.0, 0.0])
    expected[2:] = expected[parent[2:]]
    np.testing.assert_array_equal(np.asarray(new.pbt.fitness), expected)


def test_init_prior_draws_each_members_values_from_the_priors():
    config = Config.create(
        num_envs=4, num_steps=8,
        pbt={"explore": {"learning_rate": "loguniform:1e-5,1e-2"}, "init": "prior"},
    )  # fmt: skip
    lr = np.asarray(_train_state_population(config, 16).pbt.hparams.learning_rate)
    assert len(set(lr.tolist())) == 16 and lr.min() >= 1e-5 and lr.max() <= 1e-2
    assert (np.log10(lr) < -3.5).any() and (np.log10(lr) > -3.5).any()
    fixed = Config.create(
        num_envs=4, num_steps=8, pbt={"explore": {"learning_rate": "uniform:1e-4,1e-2"}}
    )
    lr = np.asarray(_train_state_population(fixed, 4).pbt.hparams.learning_rate)
    assert (lr == np.float32(fixed.hp.learning_rate)).all()


@pytest.mark.parametrize(
    "argv",
    [
        ["algorithm=trpo", "sampling=vine", "vine_states=8", "vine_actions=2",
         "total_env_steps=1152", "pbt.explore.max_kl=loguniform:1e-3,1e-1"],
        ["algorithm=npg", "pbt.explore.max_kl=loguniform:1e-3,1e-1"],
        ["algorithm=vpg", "memory=gru", "memory_size=8",
         "pbt.explore.learning_rate=loguniform:1e-4,1e-2"],
        ["algorithm=grpo", "group_size=2", "num_minibatches=2",
         "pbt.explore.learning_rate=loguniform:1e-4,1e-2"],
    ],
    ids=["trpo-vine", "npg", "vpg-gru", "grpo"],
)  # fmt: skip
def test_every_control_algorithm_trains_under_pbt(argv, tmp_path):
    out = tmp_path / "run"
    small = ["--seeds", "2", "--no-progress", "num_envs=4", "num_steps=16",
             "total_env_steps=256", "eval_episodes=1", "pbt.ready=2"]  # fmt: skip
    assert train.main([*small, *argv, "--out", str(out)]) == 0
    m = _columns(out)
    name = argv[-1].split("=")[0].removeprefix("pbt.explore.")
    assert m["pbt/parent"].shape[1] >= 2 and np.isfinite(m[f"hp/{name}"]).all()
    steps = [t for t in range(m["pbt/parent"].shape[1]) if (t + 1) % 2 == 0]
    assert (m["pbt/parent"][:, steps] != np.arange(2)[:, None]).any(axis=0).all()


def test_a_window_carried_in_the_state_counts_at_the_next_step():
    # what a checkpoint holds between chunks: a window begun before this call of the run
    config = Config.create(
        num_envs=4,
        num_steps=64,
        pbt={"explore": {"learning_rate": "loguniform:1e-4,1e-2"}, "ready": 1, "fraction": 0.25},
    )  # fmt: skip (64 steps: every member finishes episodes in the one iteration)
    trainer = make_trainer(config)
    state = _train_state_population(config, 4)
    state = state.replace(
        pbt=state.pbt._replace(
            return_sum=jnp.array([1e6, 0.0, 0.0, -1e6]), episodes=jnp.array([1.0, 0.0, 0.0, 1.0])
        )
    )
    run = population_run(trainer.iteration, config.pbt.settings(), config.pbt.ready)
    new, metrics = jax.jit(run, static_argnums=2)(state, None, 1)
    assert (np.asarray(metrics["episode/count"]) > 0).all()
    assert list(np.asarray(metrics["pbt/parent"][:, 0]).astype(int)) == [0, 1, 2, 0]
