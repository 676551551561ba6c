"""`check_memory`: refuse, before anything is compiled or allocated, a run that cannot fit
at all (its population's state and one rollout, or its epochs' keys and losses), in one line.
A stage of `rlax_trpo.experiment.run`, after the Program is built.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from rlax_trpo.errors import ConfigError, arg
from rlax_trpo.experiment import parallel
from rlax_trpo.experiment.plan import RunPlan, unplaced
from rlax_trpo.experiment.population import population_initializer
from rlax_trpo.types import Program

# The loops over epochs that stack, per epoch, its key and a float32 per minibatch of each of
# their losses (`epochs_of_minibatches`): the loss and the gradient's norm; the critic's loss.
EPOCH_LOOPS = (("num_epochs", "num_minibatches", 2), ("value_epochs", "value_minibatches", 1))


def check_memory(plan: RunPlan, program: Program) -> None:
    """Refuse, in one line, a population that cannot fit: its state (the shapes of the
    vmapped `program.init`, traced without allocating anything) and one rollout (each step's
    observations, before and after the step, and four scalars), or its epochs' keys and
    losses, exceed the memory of its devices (CPU: the host's available memory; otherwise
    `memory_stats`). Only what cannot fit is refused; a device that reports nothing is not."""
    num_devices = parallel.choose_num_devices(
        plan.devices, plan.population, program.num_envs, plan.shard
    )
    abstract = _population_state(plan, program)
    state, obs = _tree_bytes(abstract), getattr(abstract, "obs", None)
    state += _tree_bytes(unplaced(program.shared))  # one copy of what the members share
    steps = getattr(plan.config, "num_steps", 0)
    per_step = 2 * _tree_bytes(obs) + 10 * plan.population * (program.num_envs or 0)
    rollout = steps * per_step if obs is not None else 0
    available, where, share = _device_memory(num_devices)
    state, rollout = int(state * share), int(rollout * share)  # this process's devices' part
    if available is None:
        return
    if state + rollout > available:
        raise ConfigError(
            f"{arg('seeds')}: {len(plan.settings)} setting(s) x {plan.seeds} seed(s) = "
            f"{plan.population} member(s) need at least {_size(state + rollout)} (state "
            f"{_size(state)}, one rollout {_size(rollout)}), more than the {_size(available)} "
            f"{where}; use fewer seeds or settings, or a smaller num_envs x num_steps or network"
        )
    for epochs, minibatches, floats in EPOCH_LOOPS:  # each epoch's key (8 bytes) and losses
        e, m = getattr(plan.config, epochs, None), getattr(plan.config, minibatches, None) or 1
        held = int(plan.population * (e or 0) * (8 + 4 * floats * m) * share)
        if isinstance(e, int) and held > available:
            raise ConfigError(
                f"{epochs}: {e} epochs x {m} minibatches hold at least {_size(held)} per "
                f"iteration for {plan.population} member(s) (each epoch's key and losses), more "
                f"than the {_size(available)} {where}; use fewer {epochs}"
            )


def _population_state(plan: RunPlan, program: Program) -> Any:
    """The shapes and dtypes of the population's initial state (`jax.eval_shape`)."""
    key_data = jax.eval_shape(
        lambda: jax.random.key_data(jax.random.split(jax.random.key(0), plan.population))
    )
    hparams = jax.tree.map(
        lambda _: jax.ShapeDtypeStruct((plan.population,), np.float32), program.hparams
    )
    shared = unplaced(program.shared)
    return jax.eval_shape(population_initializer(program), key_data, hparams, shared)


def _tree_bytes(tree: Any) -> int:
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))  # keys too


def _device_memory(num_devices: int) -> tuple[int | None, str, float]:
    """The memory this process's devices of the run can use, where it is, and their share of
    the run's devices: the host's available memory for CPU devices (which share it), else
    the devices' allocator limits less what is in use; None when they do not say."""
    mine = [d for d in jax.devices()[:num_devices] if d.process_index == jax.process_index()]
    if not mine:
        return None, "", 0.0
    share = len(mine) / num_devices
    if mine[0].platform == "cpu":
        return host_memory_available(), "available on this host", share
    stats = [d.memory_stats() or {} for d in mine]
    if not all("bytes_limit" in s for s in stats):
        return None, "", share
    free = sum(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats)
    kind = f"{mine[0].platform.upper()} device(s) ({mine[0].device_kind})"
    return free, f"of {len(mine)} {kind}", share


def host_memory_available() -> int | None:
    """Bytes of memory the host can still give this process: the kernel's estimate
    (`MemAvailable`), capped by a container's limit (cgroup v2 or v1); None if unknown."""
    limits = []
    meminfo = _read("/proc/meminfo")
    for line in (meminfo or "").splitlines():
        if line.startswith("MemAvailable:"):
            limits.append(int(line.split()[1]) * 1024)
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (f"{v1}limit_in_bytes", f"{v1}usage_in_bytes"),
    ):
        limit, usage = _read(limit_file), _read(usage_file)
        if limit and usage and limit.strip().isdigit() and usage.strip().isdigit():
            limits.append(int(limit) - int(usage))
    if not limits and hasattr(os, "sysconf"):
        try:
            limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
        except (ValueError, OSError):
            pass
    return max(min(limits), 0) if limits else None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _size(n: int) -> str:
    """Bytes for people: 1.5 GB, 3.2 TB (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"
