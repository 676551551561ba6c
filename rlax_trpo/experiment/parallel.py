"""Spreading a run over devices with `jax.sharding`: a population axis or an environment axis.

Two layouts, both plain GSPMD (the compiler partitions the program and inserts the
collectives; no `pmap`, no hand-written `psum`):

- `"population"`: the leading axis of every array (seeds x settings) is split over a 1-D
  mesh `("pop",)`. Members never talk to each other, so each device runs its share of the
  population and the results equal a single-device run.
- `"envs"`: one large run splits its environment axis (`[pop, num_envs, ...]` leaves of the
  carry: env states, observations, episode counters) over a mesh `("env",)`; parameters and
  optimiser state are replicated. The environment steps and the rollout's forward passes
  run split. With `shuffle: per_env` the update's batch stays split too (env-major flatten,
  per-environment shuffles) and its means become all-reduces; with the default
  `shuffle: batch` the partitioner all-gathers the trajectory and runs the update
  replicated (docs/operations.md). Results equal a single-device run up to float rounding.
- `"model"`: a language model's weights (`Program.shared`) and the population's state are split
  over a mesh `("model",)` along their largest axis the device count divides
  (`model_sharding`), so a model too large for one device runs on several; the compiler
  gathers each layer's weights where it is used. Results equal a single-device run up to
  float rounding.

Multi-host: call `initialize_distributed` (a thin wrapper of `jax.distributed.initialize`)
in every process before anything else touches JAX; `jax.devices()` then lists the devices
of all hosts and the same meshes span them. Nothing here is traced or jitted.

Two timeouts govern a multi-process run. The peer timeout is how long a process may go
without a heartbeat before the runtime counts it dead. The start-up timeout is how long a
live process is waited for where the processes meet: joining, the backend's exchange of
device topologies, after compiling (`meet`) and at shutdown. Processes compile at their own
pace, and Gloo (the CPU collectives) gives the first collective of a group of devices a
fixed 30 s for every process to arrive (`gloo::rendezvous::Context`'s default timeout, which
XLA does not set), so the run meets after compiling, before its first collective.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlax_trpo.errors import ConfigError

LAYOUTS = ("population", "envs", "model")
# TrainState fields whose arrays have the environment axis right after the population axis.
ENV_AXIS_FIELDS = ("env_state", "obs", "episode", "return_acc", "memory", "first")


PEER_TIMEOUT = 60  # seconds without a heartbeat before a process counts as dead
STARTUP_TIMEOUT = 600  # seconds a live process is waited for where the processes meet
_startup_timeout = [STARTUP_TIMEOUT]  # this process's, set by initialize_distributed


def initialize_distributed(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    peer_timeout: int = PEER_TIMEOUT,
    startup_timeout: int = STARTUP_TIMEOUT,
) -> None:
    """Join a multi-host run (`jax.distributed.initialize`); arguments left None are
    auto-detected on Cloud TPU, SLURM and Open MPI clusters. Call it before JAX starts its
    backend (`platform.setup_cpu` does not start it). CPU devices of different processes
    talk through gloo (TCP), so a multi-process run also works on CPUs alone.
    `peer_timeout` (seconds) is how long a process may go without a heartbeat before the
    runtime counts it dead (`rlax_trpo.experiment.peers`); `startup_timeout` bounds every
    wait for a live process where they meet: joining, the devices' topology, `meet` and
    shutdown."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    minutes = -(-startup_timeout // 60)  # the backend's topology exchange counts minutes
    jax.config.update("jax_cpu_get_local_topology_timeout_minutes", minutes)
    jax.config.update("jax_cpu_get_global_topology_timeout_minutes", minutes + 1)
    _startup_timeout[0] = startup_timeout
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=startup_timeout,
        heartbeat_timeout_seconds=peer_timeout,
        shutdown_timeout_seconds=startup_timeout,
    )


def choose_num_devices(
    requested: int | None, population: int, num_envs: int | None, layout: str
) -> int:
    """How many devices to use; a one-line `ConfigError` when the split cannot be even.

    With `requested=None` the population layout takes the most devices that divide the
    population (so `--seeds 6` on 4 devices uses 3), and the env layout all devices that
    divide `num_envs`.
    """
    available = jax.device_count()
    if layout == "envs" and num_envs is None:
        raise ConfigError("--shard envs: this run has no environment axis to split")
    if layout == "model":  # any count: an array no count divides stays whole on every device
        if requested is not None and not 1 <= requested <= available:
            raise ConfigError(
                f"--devices: {requested} is not between 1 and the {available} device(s) available"
            )
        return available if requested is None else requested
    size, what = (
        (population, "the population (settings x seeds)")
        if layout == "population"
        else (num_envs, "num_envs")
    )
    if requested is None:
        return max(d for d in range(1, available + 1) if size % d == 0)
    if requested < 1 or requested > available:
        raise ConfigError(
            f"--devices: {requested} is not between 1 and the {available} device(s) available"
        )
    if size % requested:
        raise ConfigError(
            f"--devices: {what} = {size} is not divisible by {requested} "
            f"devices; choose a device count that divides {size}"
        )
    return requested


def describe_devices() -> dict[str, Any]:
    """What a run's summary records about the machine: device kind, platform, processes."""
    first = jax.devices()[0]
    return {
        "device": str(first.device_kind),
        "platform": first.platform,
        "num_processes": jax.process_count(),
    }


def make_mesh(num_devices: int, layout: str) -> Mesh:
    """A 1-D mesh over the first `num_devices` devices, axis `pop`, `env` or `model`."""
    devices = np.asarray(jax.devices()[:num_devices])
    axis = {"population": "pop", "envs": "env", "model": "model"}[layout]
    return Mesh(devices, (axis,))


def population_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (population) axis split over the mesh when the layout is `population`,
    replicated otherwise."""
    if "pop" in mesh.axis_names:
        return NamedSharding(mesh, PartitionSpec("pop"))
    return NamedSharding(mesh, PartitionSpec())


def state_shardings(state: Any, mesh: Mesh) -> Any:
    """A pytree of `NamedSharding`s matching a population `TrainState` (leaves `[pop, ...]`).

    Population layout: every leaf split on axis 0. Env layout: the leaves of
    `ENV_AXIS_FIELDS` split on axis 1, all others replicated.
    """
    if "pop" in mesh.axis_names:
        return jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec("pop")), state)
    if "model" in mesh.axis_names:
        return jax.tree.map(lambda x: model_sharding(mesh, x.shape, 1), state)
    replicated = NamedSharding(mesh, PartitionSpec())
    env_split = NamedSharding(mesh, PartitionSpec(None, "env"))
    shardings = jax.tree.map(lambda _: replicated, state)
    updates = {f: jax.tree.map(lambda _: env_split, getattr(state, f)) for f in ENV_AXIS_FIELDS}
    return shardings.replace(**updates)


def model_spec(shape: tuple[int, ...], size: int, skip: int = 0) -> PartitionSpec:
    """Model layout: an array split over `size` devices along its largest axis `size`
    divides (its first `skip` axes excepted: the population's), else whole on every device.
    Weight matrices are split (each device holds a share of every layer, as in fully sharded
    data parallelism) and the compiler gathers them where they are used."""
    axes = [i for i in range(skip, len(shape)) if shape[i] % size == 0 and shape[i] >= size]
    if size == 1 or not axes:
        return PartitionSpec()
    axis = max(axes, key=lambda i: (shape[i], -i))
    return PartitionSpec(*([None] * axis), "model")


def model_sharding(mesh: Mesh, shape: tuple[int, ...], skip: int = 0) -> NamedSharding:
    """`model_spec` on `mesh` (whole on every device unless the mesh is the model layout's)."""
    if "model" not in mesh.axis_names:
        return NamedSharding(mesh, PartitionSpec())
    return NamedSharding(mesh, model_spec(shape, mesh.devices.size, skip))


def put_shared(shared: Any, mesh: Mesh) -> Any:
    """`Program.shared` on the mesh: split by `model_sharding` in the model layout, whole on
    every device in the others (None stays None)."""
    if shared is None:
        return None
    return put(shared, jax.tree.map(lambda x: model_sharding(mesh, np.shape(x)), shared))


def put(tree: Any, sharding: Any) -> Any:
    """Place host arrays on the mesh (one sharding, or a pytree of them matching `tree`).

    Uses `jax.make_array_from_callback`, which also builds global arrays in multi-host runs.
    Typed PRNG keys are placed as key data and wrapped again.
    """
    if isinstance(sharding, jax.sharding.Sharding):
        sharding = jax.tree.map(lambda _: sharding, tree)
    return jax.tree.map(_put_leaf, tree, sharding)


def _put_leaf(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        return jax.random.wrap_key_data(_put_leaf(jax.random.key_data(x), sharding))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def barrier(name: str) -> None:
    """Wait for every process (a no-op in a one-process run): a collective, so only once
    the processes have met (`meet`) and run their first collectives together."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


_meetings = [0]


def meet(name: str) -> None:
    """Wait for every process at the distributed runtime's barrier (no collective, so no
    Gloo deadline), for at most the start-up timeout; a no-op in a one-process run. Every
    process meets at the same points in the same order (each meeting is numbered)."""
    if jax.process_count() == 1:
        return
    from jax._src import distributed

    _meetings[0] += 1
    client = distributed.global_state.client
    if client is None:  # a runtime without JAX's coordination service
        barrier(name)
        return
    client.wait_at_barrier(f"rlax_trpo/{_meetings[0]}/{name}", _startup_timeout[0] * 1000)


def run_token() -> int:
    """This process's id, or in a multi-process run process 0's, broadcast: the same number
    in every process (names the run's temporary folder, which all processes write to)."""
    import os

    if jax.process_count() == 1:
        return os.getpid()
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(os.getpid())))


def gather_from_processes(x: np.ndarray) -> np.ndarray:
    """Every process's `x` (the same shape in each), stacked in process order: a collective,
    called by every process at the same point."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x))


def to_host(tree: Any) -> Any:
    """Fetch (possibly sharded, possibly multi-host) arrays as numpy, on every process."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)
