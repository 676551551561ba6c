"""Every bundled config's programs lower on this CPU without LAPACK, and for CUDA and TPU
with no CPU-only call.

`experiment.run` compiles a program's `init`, `run` and `evaluate`, vmapped over the
population. Here each is traced once and lowered twice with `lowering_platforms` (jaxlib's
CPU build carries the lowering rules of every platform):

- for the CPU, where the StableHLO text must hold no `lapack_*` custom call: a vmapped LAPACK
  QR or Cholesky deadlocks jaxlib's CPU runtime (docs/upstream/cpu_qr_deadlock.md,
  docs/upstream/cpu_lapack_deadlock.md), so networks use a LAPACK-free orthogonal initialiser and
  `rlax_trpo.platform.setup_cpu` (applied by conftest) lowers the physics suites' Cholesky and
  triangular solves as plain HLO;
- for `("cuda", "tpu")`, where the text must hold no custom call that exists only on the CPU:
  LAPACK (`lapack_*`), DUCC FFTs and CPU host callbacks. setup_cpu's CPU-only lowering rules
  (straight-line threefry, LAPACK-free linear algebra) must not reach a GPU or TPU program.

Progress callbacks are left out (a host callback lowers only for the running backend's
platform); programs are built without one, as `make_program(config)` does by default.
Physics configs (Brax, MuJoCo Playground) and Craftax take 10-60 s each to trace and are
marked slow.
"""

from __future__ import annotations

import importlib.util
import os
import re

import jax
import jax.numpy as jnp
import pytest
import yaml

from rlax_trpo.config.defaults import bundled_config_names, find_config
from rlax_trpo.experiment.population import (
    population_evaluator,
    population_initializer,
    population_runner,
)
from rlax_trpo.experiment.program import make_program

PLATFORMS = ("cuda", "tpu")
CPU_ONLY = re.compile(r"lapack|ducc|cpu", re.IGNORECASE)
SUITES = {
    "brax/": "brax",
    "playground/": "mujoco_playground",
    "jumanji/": "jumanji",
    "craftax/": "craftax",
}
PHYSICS = ("brax/", "playground/")
HEAVY = (*PHYSICS, "craftax/")  # slow to trace: one config per suite unless LOWER_ALL


def custom_call_targets(text: str) -> set[str]:
    """The custom-call targets of a lowered module's text (both spellings StableHLO uses)."""
    return set(re.findall(r"custom_call\s*@([\w.$-]+)", text)) | set(
        re.findall(r'call_target_name\s*=\s*"([^"]+)"', text)
    )


def cpu_only_calls(text: str) -> list[str]:
    """The custom calls in `text` that only the CPU runs."""
    return sorted(t for t in custom_call_targets(text) if CPU_ONLY.search(t))


def load(name: str, model_path=None):
    """A bundled config; a pretrained model's reads `model_path` (a small random folder, or a
    callable that makes one, called only for such a config)."""
    from rlax_trpo.config import load_config

    if not yaml.safe_load(find_config(name).read_text()).get("model_path"):
        return load_config(name)
    return load_config(name, [f"model_path={model_path() if callable(model_path) else model_path}"])


def lowered_programs(
    program, platforms=(PLATFORMS,), population: int = 2
) -> dict[tuple[str, ...], dict[str, str]]:
    """StableHLO text of the population's init, run (one iteration) and evaluate programs,
    vmapped as `experiment.run` vmaps them, for each tuple of platforms in `platforms` (each
    program traced once)."""
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), population))
    hps = jax.tree.map(lambda x: jnp.broadcast_to(x, (population, *jnp.shape(x))), program.hparams)
    init, shared = population_initializer(program), program.shared
    state = jax.eval_shape(init, keys, hps, shared)
    calls = {
        "init": (jax.jit(init), (keys, hps, shared)),
        "run": (jax.jit(population_runner(program), static_argnums=2), (state, hps, 1, shared)),
        "evaluate": (jax.jit(population_evaluator(program)), (state, keys, shared)),
    }
    traced = {name: fn.trace(*args) for name, (fn, args) in calls.items()}
    return {
        target: {name: t.lower(lowering_platforms=target).as_text() for name, t in traced.items()}
        for target in platforms
    }


# MuJoCo physics: each suite is lowered with one algorithm on its cheapest model (PPO and
# TRPO share the physics step, and the other models run the same code; lowering all eight
# physics configs costs about 3 CPU-minutes). Brax and Playground are both audited, with both
# algorithms between them. Craftax likewise: PPO's config only (TRPO's runs
# the same world step). RLAX_TRPO_LOWER_ALL=1 lowers every config.
AUDITED_HEAVY = ("ppo_brax_inverted_pendulum", "trpo_playground_cartpole_balance", "ppo_craftax")
# Configs whose programs hold nothing an audited config's do not: the same algorithm, network
# and environment, with other sizes and values (ppo_cartpole_purejaxrl adds value clipping, an
# elementwise clip; grpo_lm_max_digit is grpo_lm_add without its warm start, grpo_lm_sort the
# same model on another task's tokens). Lowered with RLAX_TRPO_LOWER_ALL=1.
TWINS = {
    "ppo_cartpole_purejaxrl": "ppo_cartpole",
    "ppo_memory_cartpole_purejaxrl": "ppo_memory_cartpole",
    "grpo_lm_max_digit": "grpo_lm_add",
    "grpo_lm_sort": "grpo_lm_add",
}
LOWER_ALL = os.environ.get("RLAX_TRPO_LOWER_ALL") == "1"


def _params():
    out = []
    for name in bundled_config_names():
        env = yaml.safe_load(find_config(name).read_text()).get("env") or ""
        marks = [pytest.mark.slow] if env.startswith(HEAVY) else []
        if env.startswith(HEAVY) and name not in AUDITED_HEAVY and not LOWER_ALL:
            marks.append(pytest.mark.skip(reason="the same env step as an audited config; "
                                          "RLAX_TRPO_LOWER_ALL=1 lowers it too"))  # fmt: skip
        if name in TWINS and not LOWER_ALL:
            marks.append(pytest.mark.skip(reason=f"holds no code {TWINS[name]} lacks; "
                                          "RLAX_TRPO_LOWER_ALL=1 lowers it too"))  # fmt: skip
        for prefix, module in SUITES.items():
            if env.startswith(prefix) and importlib.util.find_spec(module) is None:
                marks.append(pytest.mark.skip(reason=f"{module} is not installed"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def lapack_calls(text: str) -> list[str]:
    return sorted(t for t in custom_call_targets(text) if "lapack" in t)


@pytest.mark.parametrize("name", _params())
def test_bundled_config_lowers_without_lapack_and_for_gpu_and_tpu(name, request):
    assert TWINS.get(name) in (None, *bundled_config_names())
    # every algorithm, the MLP, CNN and memory networks, Categorical and Gaussian policies,
    # physics, Jumanji, Craftax, the tiny language model and a pretrained one (only that one
    # needs `tokenizers` for its small random folder)
    config = load(name, lambda: request.getfixturevalue("tiny_lm_folder"))
    lowered = lowered_programs(make_program(config), platforms=(("cpu",), PLATFORMS))
    for part, text in lowered[("cpu",)].items():
        assert "func.func public @main" in text, f"{name} {part}: no main function"
        assert lapack_calls(text) == [], f"{name} {part} on CPU: LAPACK custom calls"
    for part, text in lowered[PLATFORMS].items():
        assert "func.func public @main" in text, f"{name} {part}: no main function"
        assert cpu_only_calls(text) == [], f"{name} {part}: CPU-only custom calls"


def _spd(a):
    return jnp.linalg.cholesky(a @ jnp.swapaxes(a, -1, -2) + jnp.eye(a.shape[-1]))


def test_the_check_flags_lapack_and_host_callbacks_lowered_for_cpu():
    x = jnp.ones((3, 4, 4))
    eigh = jax.jit(lambda a: jnp.linalg.eigh(a + jnp.swapaxes(a, -1, -2))[0]).trace(x)
    on_cpu = eigh.lower(lowering_platforms=("cpu",)).as_text()
    assert any(t.startswith("lapack_") for t in cpu_only_calls(on_cpu)), on_cpu[-2000:]
    assert cpu_only_calls(eigh.lower(lowering_platforms=PLATFORMS).as_text()) == []

    # A host callback lowers only for the platform of the devices it runs on ("the platform for
    # the specified backend cuda is different from the lowering platform cpu" on a GPU), so its
    # argument is placed on the CPU device, which every backend's process also has.
    on_cpu_device = jax.device_put(1.0, jax.devices("cpu")[0])
    callback = jax.jit(lambda v: jax.debug.callback(print, v) or v + 1).trace(on_cpu_device)
    assert cpu_only_calls(callback.lower(lowering_platforms=("cpu",)).as_text()) != []


def test_cpu_only_lowering_rules_stay_on_the_cpu():
    """setup_cpu's LAPACK-free Cholesky (registered with more than one CPU device) is the CPU's
    alone: CUDA still gets cuSOLVER and TPU XLA's own op."""
    traced = jax.jit(_spd).trace(jnp.ones((3, 4, 4)))
    on_cpu = custom_call_targets(traced.lower(lowering_platforms=("cpu",)).as_text())
    if any(t.startswith("lapack_") for t in on_cpu):
        pytest.skip("LAPACK-free linear algebra is not registered (one CPU device)")
    assert on_cpu == set()
    on_cuda = custom_call_targets(traced.lower(lowering_platforms=("cuda",)).as_text())
    assert any(t.startswith("cusolver_potrf") for t in on_cuda), on_cuda
    on_tpu = traced.lower(lowering_platforms=("tpu",)).as_text()
    assert custom_call_targets(on_tpu) == set() and "cholesky" in on_tpu
