"""Host-side setup that call sites apply before JAX starts its backend.

Nothing here runs at import; `train.py`, the tests, the benchmarks and the notebooks call
`setup_cpu()` first thing, and `rlax_trpo.run` calls it (`setup_cpu_for_run`) when JAX has
not started yet, so a script gets the devices the command line gets. It does three things,
all on the CPU backend only (a GPU or TPU run is unaffected: the CPU client is not its
default backend):

- **One CPU device per usable core** (`jax_num_cpu_devices`), unless `devices` or
  `XLA_FLAGS=--xla_force_host_platform_device_count=N` says otherwise. XLA:CPU runs one
  program on one device with its intra-op thread pool, and the small kernels of RL training
  (64-unit layers, a few envs per member) keep that pool mostly idle; `experiment.run` shards
  a population over the devices instead, so every core runs its own members. A one-member
  run stays on one device.
- **Straight-line threefry** (`unroll_threefry_on_cpu`): jax lowers the threefry hash on
  CPU, and only there, as a `fori_loop` of five rounds to save compile time; inside a
  vmapped environment step (every gymnax reset draws a random start state) that loop runs
  with loop-carried copies, about 100 tiny kernels per draw. Straight-line, XLA fuses the
  hash into one kernel; the bits are identical. `RLAX_TRPO_THREEFRY=rolled` keeps jax's
  lowering. benchmarks/device_scaling.py measures both. Not on jaxlib 0.11, whose XLA:CPU
  does not finish compiling it (`straight_threefry_compiles`).
- **Linear algebra without LAPACK** (`lapack_free_linalg_on_cpu`): jaxlib 0.10's batched
  LAPACK kernels (Cholesky, triangular solve, LU, QR) split a large batch into tasks on
  XLA's intra-op pool and wait for them from a thread of that same pool; once every pool
  thread waits, the process hangs at 0% CPU (docs/upstream/cpu_lapack_deadlock.md). That needs
  only two such calls running at once, which one device allows as well as several: flax's
  orthogonal initialisers of two layers, or the mass-matrix factorisations of MuJoCo
  physics (Brax, Playground) in an environment's step and in its reset. So on every CPU
  device count these are lowered as on TPU instead, in plain HLO: Cholesky and triangular
  solves of at most 32 rows unrolled over the columns (`rlax_trpo.small_linalg`: 0.61-0.73x
  LAPACK's env steps/s on HumanoidWalk's 27x27 mass matrix, where XLA's own expanders gave
  0.26x; no cost on 2x2 ones), larger ones
  through XLA's expanders, LU and Householder QR as jax writes them (benchmarks/cpu_linalg.py,
  benchmarks/lapack_one_device.py). `RLAX_TRPO_LAPACK=keep` keeps jaxlib's LAPACK.

The intra-op pool keeps all its threads. A batched LAPACK QR, as in flax's orthogonal
initialiser, blocks a pool thread on tasks queued to the same pool
(docs/upstream/cpu_qr_deadlock.md); `rlax_trpo.initializers.orthogonal`, which the networks use,
makes the same matrices without a LAPACK call.

Apart from that setup, on every backend: `finish_computations_at_exit`, which the program
builders call, makes a process wait at exit for the computations it dispatched.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

THREEFRY_OPT_OUT = "RLAX_TRPO_THREEFRY"
LAPACK_OPT_OUT = "RLAX_TRPO_LAPACK"
# jax.lax.linalg primitives whose CPU lowering is a batched LAPACK call and whose
# platform-independent lowering is plain HLO.
LAPACK_PRIMITIVES = ("cholesky_p", "triangular_solve_p", "lu_p", "geqrf_p", "householder_product_p")
_FORCE_FLAG = "--xla_force_host_platform_device_count"
# XLA:CPU flags for work where compiling costs more than running: test suites, smoke runs,
# many short runs of small programs. The legacy elemental emitters at LLVM optimisation level 0
# compile a 640-step PPO CartPole run's three programs in 3.9 s instead of 9.5 s (2-core AMD
# EPYC, jax 0.10.2); jaxlib 0.11.1 removed the legacy emitters and their flag (XLA stops the
# process at start on a flag it does not know), and there level 0 alone halves the compile
# (8.3-8.9 s to 4.2-4.4 s, jax 0.11.2). The code they make runs slower, and it rounds
# differently in the last bits from the default build; two programs that contain the same
# computation (an initialisation alone and inside a training run) can also round it
# differently from each other, where the default build happens to agree. Add them to
# XLA_FLAGS before JAX starts.
LEGACY_EMITTERS_UNTIL = (0, 11, 1)  # the first jaxlib without --xla_cpu_use_fusion_emitters


def jaxlib_version() -> tuple[int, ...]:
    """The installed jaxlib's version as numbers (from its metadata: JAX is not started)."""
    import importlib.metadata
    import re

    try:
        text = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return ()
    return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:3])


def fast_compile_xla_flags(version: tuple[int, ...] | None = None) -> str:
    """`FAST_COMPILE_XLA_FLAGS` for jaxlib `version` (default: the installed one)."""
    version = jaxlib_version() if version is None else version
    legacy = "--xla_cpu_use_fusion_emitters=false " if version < LEGACY_EMITTERS_UNTIL else ""
    return legacy + "--xla_backend_optimization_level=0"


FAST_COMPILE_XLA_FLAGS = fast_compile_xla_flags()


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo's "model name"; else `platform.processor()`),
    which with the device count decides whether a CPU run reproduces another bit for bit."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def cpu_signature() -> str:
    """The CPU's model name with its family, model and stepping numbers and a short hash of
    its feature flags (Linux: /proc/cpuinfo), e.g. "AMD EPYC (25/17/1, flags 1a2b3c4d)".

    XLA compiles CPU programs for the host it runs on, so bit-for-bit results carry over only
    between CPUs that agree on all of these; a virtual machine's model name alone ("AMD EPYC")
    does not tell two processor generations apart. Elsewhere: `cpu_name()`.
    """
    import hashlib

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if not sep or key in fields:
                    if not line.strip() and fields:
                        break  # the first processor's block is enough
                    continue
                fields[key] = value.strip()
    except OSError:
        return cpu_name()
    numbers = "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping"))
    flags = " ".join(sorted(fields.get("flags", "").split()))
    digest = hashlib.sha256(flags.encode()).hexdigest()[:8]
    return f"{cpu_name()} ({numbers}, flags {digest})"


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask), else `os.cpu_count()`."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def setup_cpu(devices: int | None = None, environ: MutableMapping[str, str] = os.environ) -> int:
    """Before JAX starts: `devices` CPU devices (default one per usable core), the
    straight-line threefry and LAPACK-free linear algebra.
    Returns the number of CPU devices JAX will create.

    Once JAX's backend has started (any computation, `jax.devices()` included), the device
    count can no longer change: then it is left as it is and the current count returned.
    `XLA_FLAGS=--xla_force_host_platform_device_count=N` in the environment wins over the
    default (not over an explicit `devices`).
    """
    if environ.get(THREEFRY_OPT_OUT, "").lower() != "rolled":
        unroll_threefry_on_cpu()
    import jax  # deferred: importing this module must not import JAX

    if _backends_started():
        devices = len(jax.devices("cpu"))
    else:
        if devices is None:
            forced = _forced_count(environ.get("XLA_FLAGS", ""))
            devices = forced if forced is not None else usable_cores()
        jax.config.update("jax_num_cpu_devices", int(devices))
    if environ.get(LAPACK_OPT_OUT, "hlo").lower() != "keep":
        lapack_free_linalg_on_cpu()
    return int(devices)


def setup_cpu_for_run(devices: int | None = None) -> str | None:
    """What `rlax_trpo.run` does first, so that a run started from Python gets the devices
    `rlax-trpo train` gets: `setup_cpu(devices)` while JAX's backend has not started, keeping
    a device count already chosen (by the command line, or `jax_num_cpu_devices`).

    Returns None, or a one-line note when the backend had already started on the CPU with
    fewer devices than the command line would use (the count cannot change any more)."""
    import jax

    chosen = int(jax.config.jax_num_cpu_devices)
    started = _backends_started()
    have = setup_cpu(chosen if chosen > 0 else devices)
    if not started or devices is not None or jax.default_backend() != "cpu":
        return None
    forced = _forced_count(os.environ.get("XLA_FLAGS", ""))
    wanted = forced if forced is not None else usable_cores()
    if have >= wanted:
        return None
    return (
        f"note: JAX had started with {have} CPU device(s) before this run, so it runs on "
        f"{have} (`rlax-trpo train` uses {wanted}, one per core); call "
        f"rlax_trpo.platform.setup_cpu() before any JAX computation to get them"
    )


def _forced_count(flags: str) -> int | None:
    for flag in flags.split():
        if flag.startswith(_FORCE_FLAG + "="):
            return int(flag.split("=", 1)[1])
    return None


def finish_computations_at_exit() -> None:
    """Make the interpreter wait, before it shuts down, for the computations still running.

    jax dispatches asynchronously: a script whose last line starts a training run, or prints
    only the shape of its result, reaches its end while the run executes. Nothing in jax's
    exit path waits for it: the C runtime's exit can destroy jaxlib's libraries while XLA's
    threads still run the program's kernels, and the process dies of SIGSEGV after printing
    everything (docs/upstream/cpu_exit_while_running.md). An exit handler that waits for every
    live array runs first, while the interpreter and the libraries are whole. Registered
    once, by the first program built (`make_trainer`, `make_grpo`), never at import."""
    global _EXIT_WAIT_REGISTERED
    if not _EXIT_WAIT_REGISTERED:
        atexit.register(wait_for_live_arrays)
        _EXIT_WAIT_REGISTERED = True


_EXIT_WAIT_REGISTERED = False


def wait_for_live_arrays() -> None:
    """Block until every live array of every started backend is computed (or failed): on a
    GPU machine the CPU client's arrays too (`jax.live_arrays()` lists the default backend's
    alone)."""
    jax = sys.modules.get("jax")
    if jax is None or not _backends_started():
        return
    arrays = []
    for platform in _started_platforms():
        try:
            arrays += jax.live_arrays(platform)
        except Exception:  # a backend that cannot list its arrays: nothing to wait for there
            pass
    for array in arrays:
        try:
            array.block_until_ready()
        except Exception:  # deleted or failed: its computation is over either way
            pass


def _started_platforms() -> list[str | None]:
    """The platforms whose backends are started (once one is, jax has started them all)."""
    try:
        from jax._src import xla_bridge

        return sorted(xla_bridge.backends())  # started already: no new backend is made
    except Exception:  # jax's internals moved: the default backend at least
        return [None]


def _backends_started() -> bool:
    try:  # jax has no public query for this
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return False


# jaxlib 0.11.0 to 0.11.2: XLA:CPU's LLVM loop vectoriser does not finish compiling the
# straight-line hash once it is vmapped over 3 or more keys (stuck in
# llvm::vputils::onlyFirstLaneUsed; docs/upstream/cpu_threefry_straight_line_hang.md), which
# made `python train.py` compile for ever; jaxlib 0.10.2 compiles it in under a second.
STRAIGHT_THREEFRY_BEFORE = (0, 11, 0)


def straight_threefry_compiles(version: tuple[int, ...] | None = None) -> bool:
    """Whether XLA:CPU of jaxlib `version` (default: the installed one) compiles the
    straight-line threefry (see STRAIGHT_THREEFRY_BEFORE)."""
    version = jaxlib_version() if version is None else version
    return version < STRAIGHT_THREEFRY_BEFORE


def unroll_threefry_on_cpu() -> bool:
    """Lower `threefry2x32` on CPU as jax does on GPU: straight-line, no `fori_loop`.

    Affects programs compiled afterwards; the random bits are the same either way. Uses
    jax's private lowering table (there is no public switch); returns False and changes
    nothing where that is not as expected, or where this jaxlib's XLA:CPU cannot compile
    it (`straight_threefry_compiles`).
    """
    if not straight_threefry_compiles():
        return False
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry
    except ImportError:
        return False
    rule = getattr(threefry, "_threefry2x32_lowering_rule", None)
    primitive = getattr(threefry, "threefry2x32_p", None)
    if rule is None or primitive is None:
        return False
    mlir.register_lowering(primitive, rule, platform="cpu")
    return True


def lapack_free_linalg_on_cpu() -> bool:
    """Lower Cholesky, triangular solve, LU and QR on CPU as jax does on TPU: plain HLO.

    Affects programs compiled afterwards; results agree with LAPACK to float32 rounding
    (tests/test_platform.py). Uses jax's private lowering tables (there is no public
    switch); returns False and changes nothing where they are not as expected.
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.lax import linalg
    except ImportError:
        return False
    generic = getattr(mlir, "_lowerings", {})
    rules = []
    for name in LAPACK_PRIMITIVES:
        primitive = getattr(linalg, name, None)
        rule = getattr(generic.get(primitive), "rule", None)
        if rule is None:
            return False
        rules.append((primitive, rule))
    from rlax_trpo import small_linalg

    small = {
        "cholesky_p": small_linalg.cholesky,
        "triangular_solve_p": small_linalg.triangular_solve,
    }
    for name, (primitive, rule) in zip(LAPACK_PRIMITIVES, rules, strict=True):
        if name in small:
            rule = _unrolled_when_small(mlir.lower_fun(small[name], multiple_results=False), rule)
        mlir.register_lowering(primitive, rule, platform="cpu")
    return True


def _unrolled_when_small(unrolled: Callable[..., Any], generic: Callable[..., Any]):
    """A lowering rule: `unrolled` for matrices of at most `small_linalg.MAX_UNROLLED` rows,
    else `generic` (XLA's expander)."""
    from rlax_trpo.small_linalg import MAX_UNROLLED

    def rule(ctx: Any, *args: Any, **params: Any) -> Any:
        small = ctx.avals_in[0].shape[-1] <= MAX_UNROLLED
        return (unrolled if small else generic)(ctx, *args, **params)

    return rule
