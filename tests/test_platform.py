"""CPU setup before JAX starts: one CPU device per core (or as asked), the whole thread pool,
straight-line threefry, linear algebra without LAPACK; importing the package starts nothing."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import conftest
import numpy as np
import pytest

from rlax_trpo import platform

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, os, sys
import rlax_trpo.platform as platform
from jax._src import xla_bridge
before = {"started": xla_bridge.backends_are_initialized(), "gymnax": "gymnax" in sys.modules}
devices = int(sys.argv[1]) if len(sys.argv) > 1 else None
configured = platform.setup_cpu(devices)
import jax, jax.numpy as jnp
jax.jit(lambda x: (x @ x).sum())(jnp.ones((256, 256))).block_until_ready()
names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]
print(json.dumps({**before, "configured": configured, "again": platform.setup_cpu(7),
                  "devices": jax.device_count(), "pool_threads": names.count("tf_XLAEigen")}))
"""

linux_multicore = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux with at least 2 CPUs",
)


def _probe(script=PROBE, *args, timeout=120, **env):
    """Run `script` in a fresh interpreter (JAX not yet started) and parse its last line."""
    # No device-count flag (the child sets its own), only the suite's compile flags.
    base = {**os.environ, "XLA_FLAGS": conftest.FAST_COMPILE}
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@linux_multicore
def test_one_cpu_device_per_core_and_the_whole_pool():
    out = _probe()
    # Importing rlax_trpo.platform must not import gymnax (which starts the backends).
    assert out["started"] is False and out["gymnax"] is False
    cores = len(os.sched_getaffinity(0))
    assert out["configured"] == out["devices"] == cores
    assert out["again"] == cores  # once JAX has started, the count no longer changes
    assert out["pool_threads"] == cores  # no one-thread pool any more


def test_explicit_count_and_xla_flags():
    assert _probe(PROBE, "3")["devices"] == 3
    forced = _probe(XLA_FLAGS="--xla_force_host_platform_device_count=5")
    assert forced["configured"] == forced["devices"] == 5


LAZY_PROBE = """
import json, sys
import rlax_trpo
before = sorted(m for m in ("jax", "gymnax", "rlax_trpo.config") if m in sys.modules)
rlax_trpo.Config
after = sorted(m for m in ("jax", "gymnax", "rlax_trpo.config") if m in sys.modules)
print(json.dumps({"before": before, "after": after}))
"""


def test_package_import_is_lazy_and_complete():
    # Importing the package imports neither JAX nor gymnax (which starts JAX's backends, so
    # rlax_trpo.platform could no longer configure it); a name loads its module on first use.
    out = _probe(LAZY_PROBE)
    assert out["before"] == [] and "rlax_trpo.config" in out["after"], out
    import rlax_trpo

    for name in rlax_trpo.__all__:
        assert getattr(rlax_trpo, name) is not None
    with pytest.raises(AttributeError, match="no attribute"):
        _ = rlax_trpo.not_a_name


THREEFRY_PROBE = """
import json
import rlax_trpo.platform as platform
platform.setup_cpu()
import jax
keys = jax.random.split(jax.random.key(7), 5)
draw = jax.jit(jax.vmap(lambda k: jax.random.uniform(k, (3,))))
hlo = draw.lower(keys).compile().as_text()
print(json.dumps({"bits": jax.random.bits(jax.random.key(3), (4,)).tolist(),
                  "uniform": draw(keys).tolist(), "loops": hlo.count(" while(")}))
"""


def test_straight_line_threefry_draws_the_same_bits_without_a_loop():
    unrolled = _probe(THREEFRY_PROBE)
    rolled = _probe(THREEFRY_PROBE, RLAX_TRPO_THREEFRY="rolled")
    assert rolled["loops"] >= 1  # jax's own CPU lowering: a fori_loop per hash
    # (jaxlib 0.11's XLA:CPU cannot compile the straight line: jax's lowering is kept there)
    assert unrolled["loops"] == (0 if platform.straight_threefry_compiles() else rolled["loops"])
    assert unrolled["bits"] == rolled["bits"]
    assert unrolled["uniform"] == rolled["uniform"]


LINALG_PROBE = """
import json, re, sys
import numpy as np
import rlax_trpo.platform as platform
platform.setup_cpu(int(sys.argv[1]))
import jax, jax.numpy as jnp

def one(k):
    a = jax.random.normal(k, (12, 12)) / 12**0.5 + 2 * jnp.eye(12)
    low = jnp.linalg.cholesky(a @ a.T)
    tri = jax.scipy.linalg.solve_triangular(low, jnp.arange(12.0), lower=True)
    q, r = jnp.linalg.qr(a)
    b = jnp.arange(36.0).reshape(12, 3) / 36
    solves = [  # every form of the triangular solve (the unrolled one below 33 rows)
        jax.lax.linalg.triangular_solve(t, rhs, left_side=left, lower=lower,
                                        transpose_a=trans, unit_diagonal=unit).reshape(36)
        for lower in (True, False) for trans in (False, True) for unit in (False, True)
        for left, rhs in ((True, b), (False, b.T)) for t in (a,)  # its named triangle is read
    ]
    big = jax.random.normal(k, (40, 40)) / 40**0.5 + 2 * jnp.eye(40)  # XLA's expander
    big_low = jnp.linalg.cholesky(big @ big.T)
    big_tri = jax.scipy.linalg.solve_triangular(big_low, jnp.ones(40), lower=True)
    return (low, tri, jnp.linalg.solve(a, jnp.ones(12)), jnp.abs(q), jnp.abs(r),
            jnp.stack(solves), big_low, big_tri)

f = jax.jit(jax.vmap(one))
keys = jax.random.split(jax.random.key(1), 64)
calls = sorted(set(re.findall(r"custom_call @(lapack\\w+)", f.lower(keys).as_text())))
print(json.dumps({"calls": calls, "out": [np.asarray(x).tolist() for x in f(keys)]}))
"""


def test_linear_algebra_is_lowered_without_lapack_and_agrees_with_it():
    # batched LAPACK kernels, which can deadlock XLA's thread pool on any device count
    kernels = {"lapack_spotrf_ffi", "lapack_strsm_ffi", "lapack_sgetrf_ffi", "lapack_sgeqrf_ffi"}
    lapack = _probe(LINALG_PROBE, "1", RLAX_TRPO_LAPACK="keep")  # jax's own lowering
    assert kernels <= set(lapack["calls"])
    hlo = _probe(LINALG_PROBE, "1")  # one device too: setup_cpu's rule ignores the count
    assert hlo["calls"] == []
    for ours, theirs in zip(hlo["out"], lapack["out"], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)


HANG_PROBE = """
import json, sys, time
import rlax_trpo.platform as platform
platform.setup_cpu(2)
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def one(k):  # sizes at which jaxlib 0.10's LAPACK kernels split the batch over the pool
    a = jax.random.normal(k, (16, 16)) / 4 + 2 * jnp.eye(16)
    low = jnp.linalg.cholesky(a @ a.T)
    return jax.scipy.linalg.solve_triangular(low, jnp.ones((16, 16)), lower=True)

f = jax.jit(jax.vmap(one))
keys = jax.device_put(jax.random.split(jax.random.key(0), 1024),
                      NamedSharding(Mesh(jax.devices(), ("b",)), P("b")))
for _ in range(20):
    jax.block_until_ready(f(keys))
print(json.dumps({"devices": jax.device_count()}))
"""


def test_batched_cholesky_on_two_devices_finishes():
    # With jax's LAPACK lowering this hangs at 0% CPU in nearly every process
    # (docs/upstream/cpu_lapack_deadlock.md); `_probe` fails it after its timeout.
    assert _probe(HANG_PROBE, timeout=90)["devices"] == 2


RUN_PROBE = """
import json, sys
from rlax_trpo import load_config, run
if sys.argv[1] == "started":  # the script computes with JAX before the run
    import jax.numpy as jnp
    jnp.ones(1).block_until_ready()
tiny = ["num_envs=4", "num_steps=16", "total_env_steps=64", "eval_episodes=1"]
config = load_config("ppo_cartpole", tiny)  # as in README.md
result = run(config, seeds=2, out=sys.argv[2], progress=False)
print(json.dumps({"used": result.summary["num_devices"]}))
"""


def _run_probe(when: str, out: Path) -> tuple[dict, str]:
    # No device-count flag (the child sets its own), only the suite's compile flags.
    base = {**os.environ, "XLA_FLAGS": conftest.FAST_COMPILE}
    proc = subprocess.run(
        [sys.executable, "-c", RUN_PROBE, when, str(out)],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@linux_multicore
def test_the_python_api_gets_the_devices_of_the_command_line(tmp_path):
    # `rlax_trpo.run` from a script, JAX not started yet: one CPU device per core, as
    # `rlax-trpo train` has, so the 2 seeds run on 2 devices.
    out, err = _run_probe("fresh", tmp_path / "fresh")
    assert out["used"] == 2, err
    assert "note:" not in err
    tiny = ["num_envs=4", "num_steps=16", "total_env_steps=64", "eval_episodes=1"]
    command = [sys.executable, str(ROOT / "train.py"), "--config", "ppo_cartpole", *tiny]
    # No device-count flag (the child sets its own), only the suite's compile flags.
    base = {**os.environ, "XLA_FLAGS": conftest.FAST_COMPILE}
    subprocess.run(
        [*command, "--seeds", "2", "--no-progress", "--out", str(tmp_path / "cli")],
        env={**base, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"},
        check=True,
        capture_output=True,
        timeout=300,
    )
    csv = "metrics.csv"
    assert (tmp_path / "fresh" / csv).read_bytes() == (tmp_path / "cli" / csv).read_bytes()
    # Started before the run: the count can no longer change, and one line says so.
    out, err = _run_probe("started", tmp_path / "started")
    assert out["used"] == 1
    cores = len(os.sched_getaffinity(0))
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "JAX had started with 1 CPU device(s)" in notes[0], err
    assert f"`rlax-trpo train` uses {cores}" in notes[0] and "setup_cpu()" in notes[0]


def test_building_a_program_makes_the_interpreter_wait_for_running_computations(monkeypatch):
    # jax dispatches asynchronously, so a script can reach its end while its training run is
    # still computed; Python's shutdown then destroys the CPU client under the running program
    # (docs/upstream/cpu_exit_while_running.md). The first program built registers an exit
    # handler that waits for every live array while the interpreter is whole.
    import atexit

    import jax
    import jax.numpy as jnp

    import rlax_trpo.platform as platform
    from rlax_trpo import Config, make_train

    registered = []
    monkeypatch.setattr(platform, "_EXIT_WAIT_REGISTERED", False)
    monkeypatch.setattr(atexit, "register", registered.append)
    make_train(Config.create(total_env_steps=512, num_envs=4, num_steps=16))  # builds only
    make_train(Config.create(total_env_steps=512, num_envs=4, num_steps=16))
    assert registered.count(platform.wait_for_live_arrays) == 1, registered  # once

    def body(c, _):
        return jnp.tanh(c @ c * 0.01), None

    # On the CPU, whatever the default backend: the CPU client is the one torn down under a
    # running program (on a GPU machine the default device is not the one at stake).
    x = jax.device_put(jnp.ones((256, 256)), jax.devices("cpu")[0])
    run = jax.jit(lambda x: jax.lax.scan(body, x, None, length=3000)[0])
    run = run.lower(x).compile()
    y = run(x)
    assert not y.is_ready(), "the computation ended before the check could see it run"
    platform.wait_for_live_arrays()
    assert y.is_ready()


def test_the_exit_wait_asks_every_started_backend_for_its_arrays(monkeypatch):
    # `jax.live_arrays()` lists the default backend's arrays alone: on a GPU machine the CPU
    # client's (the one torn down under a running program) were not waited for. Checked on
    # any machine by what the wait asks jax for.
    import jax

    import rlax_trpo.platform as platform

    jax.numpy.ones(3).block_until_ready()  # the backends are started
    asked, real = [], jax.live_arrays
    monkeypatch.setattr(jax, "live_arrays", lambda p=None: asked.append(p) or real(p))
    platform.wait_for_live_arrays()
    assert "cpu" in asked, asked


def test_the_fast_compile_flags_are_the_ones_the_installed_jaxlib_knows():
    # XLA stops the process at its start on a flag it does not know (the whole suite would
    # exit at once, printing nothing): the legacy-emitter flag only before jaxlib 0.11.1.
    from rlax_trpo.platform import fast_compile_xla_flags

    assert fast_compile_xla_flags((0, 10, 2)).split() == [
        "--xla_cpu_use_fusion_emitters=false",
        "--xla_backend_optimization_level=0",
    ]
    for newer in ((0, 11, 1), (0, 11, 2), (1, 0)):
        assert fast_compile_xla_flags(newer) == "--xla_backend_optimization_level=0"
    probe = "import jax.numpy as jnp; print(float(jnp.ones(3).sum()))"
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "XLA_FLAGS": fast_compile_xla_flags(), "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "3.0", proc.stderr[-2000:]


def test_the_straight_line_threefry_is_kept_from_the_jaxlibs_that_cannot_compile_it():
    assert platform.straight_threefry_compiles((0, 10, 2))
    for stuck in ((0, 11, 0), (0, 11, 2)):
        assert not platform.straight_threefry_compiles(stuck)


CONFIG_PROBE = """
import json, os, sys
import jax
from jax._src import xla_bridge
from jax._src.interpreters import mlir
from jax._src.lax import linalg
from rlax_trpo import Config, load_config

def settings():
    rule = getattr(mlir._lowerings.get(linalg.cholesky_p), "rule", None)
    return [int(jax.config.jax_num_cpu_devices), os.environ.get("XLA_FLAGS"), repr(rule)]

before = settings()
Config.create()
Config.create(env="Breakout-MinAtar", algorithm="trpo")
try:
    load_config("configs/ppo_brax_hopper.yaml")
    brax_config = "loaded"
except Exception as err:  # brax not installed: refused by name, still without starting JAX
    brax_config = str(err).splitlines()[0]
load_config("configs/grpo_lm_sort.yaml")
try:
    Config.create(env="CartPole-v2")
except Exception as err:
    refused = str(err).splitlines()[0]
print(json.dumps({"started": xla_bridge.backends_are_initialized(), "before": before,
                  "after": settings(), "refused": refused, "brax_config": brax_config,
                  "gymnax": "gymnax" in sys.modules, "brax": "brax" in sys.modules}))
"""


def test_building_a_config_changes_nothing_of_jax():
    # Validation has no side effects: no backend started, no device count or linear-algebra
    # lowering chosen, no suite imported; `rlax-trpo train` and `run` set up the host.
    out = _probe(CONFIG_PROBE)
    assert out["started"] is False and out["before"] == out["after"], out
    assert out["gymnax"] is False and out["brax"] is False, out
    assert "did you mean 'CartPole-v1'" in out["refused"], out
    if importlib.util.find_spec("brax") is None:
        assert "needs the brax suite" in out["brax_config"], out
    else:
        assert out["brax_config"] == "loaded", out
