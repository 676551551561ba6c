"""Sharding over 4 forced host devices equals a single-device run.

XLA_FLAGS must be set before JAX initialises, and this pytest process already has JAX with
one device, so the runs happen in a subprocess.
"""

import csv
import json
import textwrap
from pathlib import Path

import conftest
import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    import jax

    assert jax.device_count() == 4, jax.devices()
    import train

    out = Path(sys.argv[1])
    pop = ["--no-progress", "--seeds", "2", "--sweep", "hp.learning_rate=1e-3,3e-4",
           "num_envs=4", "num_steps=16", "total_env_steps=320", "num_epochs=1",
           "num_minibatches=2", "eval_episodes=2"]
    assert train.main([*pop, "--out", str(out / "pop4")]) == 0
    assert train.main([*pop, "--devices", "1", "--out", str(out / "pop1")]) == 0
    # TRPO, one seed, its environment axis split over the devices (data parallel: the
    # Fisher-vector products inside conjugate gradient average over all shards).
    trpo = ["--no-progress", "algorithm=trpo", "num_envs=8", "num_steps=16",
            "total_env_steps=512", "cg_iters=4", "line_search_steps=4", "value_epochs=1",
            "value_minibatches=2", "eval_episodes=2", "--shard", "envs"]
    assert train.main([*trpo, "--out", str(out / "env4")]) == 0
    assert train.main([*trpo, "--devices", "1", "--out", str(out / "env1")]) == 0
    # shuffle: per_env, the data-parallel update: PPO minibatches and TRPO's critic minibatches
    # shuffle within each environment, so nothing is gathered.
    ppo = ["--no-progress", "num_envs=8", "num_steps=16", "total_env_steps=512", "num_epochs=2",
           "num_minibatches=4", "eval_episodes=2", "shuffle=per_env", "--shard", "envs"]
    for name, argv in (("ppo", ppo), ("trpo", [*trpo, "shuffle=per_env"])):
        for d in (1, 4):
            run = ["--devices", str(d), "--out", str(out / f"{name}_dp{d}")]
            assert train.main([*argv, *run]) == 0
    # population-based training: the members act on each other across the devices
    pbt = ["--no-progress", "--seeds", "4", "num_envs=4", "num_steps=16",
           "total_env_steps=512", "num_epochs=1", "num_minibatches=2", "eval_episodes=2",
           "pbt.explore.learning_rate=loguniform:1e-4,1e-2", "pbt.ready=2", "pbt.fraction=0.5"]
    for d in (1, 2, 4):
        assert train.main([*pbt, "--devices", str(d), "--out", str(out / f"pbt{d}")]) == 0
""")


def _rows(run: Path) -> list[dict]:
    with (run / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("devices")
    conftest.run_on_devices(SCRIPT, out, devices=4)
    return out


def test_population_sharded_over_4_devices_equals_one_device(runs):
    s4 = json.loads((runs / "pop4" / "summary.json").read_text())
    s1 = json.loads((runs / "pop1" / "summary.json").read_text())
    assert s4["num_devices"] == 4 and s1["num_devices"] == 1
    assert s4["population"] == 4
    # Members are independent, so the episodes are the same; float metrics agree to
    # rounding (XLA compiles a [1]-member shard and a [4]-member batch into different
    # vectorised loops, so they are not bitwise equal).
    _assert_close(_rows(runs / "pop4"), _rows(runs / "pop1"), rtol=1e-4, atol=1e-6)
    for a, b in zip(s4["members"], s1["members"], strict=True):
        assert a["final_return_per_seed"] == b["final_return_per_seed"]


def _assert_close(a: list[dict], b: list[dict], rtol: float, atol: float) -> None:
    assert len(a) == len(b) and len(a) > 0
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for name in ra:
            x, y = float(ra[name]), float(rb[name])
            if name.startswith("episode/") or name in ("seed", "iteration", "env_steps"):
                assert x == y or (np.isnan(x) and np.isnan(y)), name
            elif name.endswith("cg_residual"):
                # rounding noise near CG's stopping tolerance (1e-5 of ||g||): an absolute check
                assert abs(x - y) < 1e-4 and max(x, y) < 1e-3, (name, x, y)
            else:
                np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=name)


def test_env_axis_sharded_trpo_equals_one_device(runs):
    s4 = json.loads((runs / "env4" / "summary.json").read_text())
    s1 = json.loads((runs / "env1" / "summary.json").read_text())
    assert s4["num_devices"] == 4 and s1["num_devices"] == 1
    assert s4["device_layout"] == "envs"
    a, b = _rows(runs / "env4"), _rows(runs / "env1")
    assert len(a) == len(b) == 4
    # equal up to the order of float summation in the cross-device reductions
    _assert_close(a, b, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["ppo", "trpo"])
@pytest.mark.parametrize("devices", [4])
def test_data_parallel_update_equals_one_device(runs, algorithm, devices):
    summary = json.loads((runs / f"{algorithm}_dp{devices}" / "summary.json").read_text())
    assert summary["num_devices"] == devices and summary["device_layout"] == "envs"
    a, b = _rows(runs / f"{algorithm}_dp{devices}"), _rows(runs / f"{algorithm}_dp1")
    _assert_close(a, b, rtol=1e-4, atol=1e-6)


HLO_SCRIPT = textwrap.dedent("""
    import json, re

    import jax
    import numpy as np

    from rlax_trpo.experiment import parallel
    from rlax_trpo.config import config_from_dict
    from rlax_trpo.experiment.program import make_program

    def compiled_text(raw, devices):
        program = make_program(config_from_dict(raw))
        mesh = parallel.make_mesh(devices, "envs")
        hps = jax.tree.map(lambda x: np.stack([x]), program.hparams)
        keys = jax.random.split(jax.random.key(0), 1)
        abstract = jax.eval_shape(jax.vmap(program.init), keys, hps)
        sh = parallel.state_shardings(abstract, mesh)
        rep = parallel.population_sharding(mesh)
        placed = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, sh)
        hps = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), hps)
        run = jax.jit(jax.vmap(lambda s, h: program.run(s, h, 1)), out_shardings=(sh, rep))
        return run.lower(placed, hps).compile().as_text()

    out = {}
    for algo in ("ppo", "trpo"):
        for shuffle in ("batch", "per_env"):
            raw = {"algorithm": algo, "num_envs": 16, "num_steps": 32, "shuffle": shuffle,
                   "num_minibatches" if algo == "ppo" else "value_minibatches": 4}
            for d in (4,):  # 2 devices lower the same collectives (checked once: 2x the time)
                text = compiled_text(raw, d)
                kinds = "all-gather|all-reduce|all-to-all|collective-permute"
                ops = re.findall(r"= ([^=\\n]*?) (" + kinds + r")[(]", text)
                out[f"{algo}/{shuffle}/{d}"] = {
                    "all_gather": sum(op == "all-gather" for _, op in ops),
                    "all_reduce": sum(op == "all-reduce" for _, op in ops),
                    # the longest axis any collective moves (parameters: 64 at most)
                    "longest_axis": max((int(n) for shape, _ in ops
                                         for dims in re.findall(r"\\[([\\d,]*)\\]", shape)
                                         for n in dims.split(",") if n), default=0),
                }
    print(json.dumps(out))
""")


def test_data_parallel_update_gathers_nothing():
    proc = conftest.run_on_devices(HLO_SCRIPT, devices=4, timeout=600)
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    for algo in ("ppo", "trpo"):
        for d in (4,):
            # The time-major flatten gathers the trajectory; the env-major one keeps it split
            # and turns the update's batch means into all-reduces.
            assert counts[f"{algo}/batch/{d}"]["all_gather"] > 0, counts
            assert counts[f"{algo}/per_env/{d}"]["all_gather"] == 0, counts
            assert counts[f"{algo}/per_env/{d}"]["all_reduce"] > 0, counts
            # nothing batch-sized crosses devices (512 samples, 128 per device), not even
            # as an all-reduce (a global shuffle of the env-major batch reduces its indices)
            assert counts[f"{algo}/per_env/{d}"]["longest_axis"] < 128, counts


def test_pbt_gives_the_same_lineage_on_1_2_and_4_devices(runs):
    one = _rows(runs / "pbt1")
    lineage = [(r["pbt/parent"], r["hp/learning_rate"]) for r in one]
    assert len({p for p, _ in lineage}) > 1  # members copied others
    for d in (2, 4):
        assert json.loads((runs / f"pbt{d}" / "summary.json").read_text())["num_devices"] == d
        rows = _rows(runs / f"pbt{d}")
        assert [(r["pbt/parent"], r["hp/learning_rate"]) for r in rows] == lineage, d
        _assert_close(rows, one, rtol=1e-4, atol=1e-6)
