#!/usr/bin/env python
"""Where one PPO iteration's time goes: each phase compiled and timed on its own, beside the
whole iteration, PureJaxRL's whole iteration and an environment-only scan of the same width.

For every width it prints one JSON line: the seconds per iteration of

    rollout   the acting policy and the environment, `num_steps` steps of `num_envs` envs
    batch     the learner's view (normalisation) and `make_batch` (values, GAE, targets)
    update    the epochs x minibatches of the update
    iteration the three together as the training scan runs them (`Trainer.iteration`)

each with its compiled program's FLOPs, bytes accessed (XLA's cost analysis), number of
kernels (fusions and library calls in the optimised HLO, loop bodies counted once) and
kernel launches per call (copies included, each loop body times its trip count); and, with
`--purejaxrl`, PureJaxRL's own `ppo.py` at the same settings (seconds per iteration of its
whole run: its phases are one program), plus random actions through the environment alone.

    python benchmarks/profile_ppo.py --num-envs 16384 131072 --purejaxrl ppo.py --json out.json
    python benchmarks/profile_ppo.py --phases update iteration --trace compute_dtype=bfloat16

`--phases` times some of the phases only. `--trace` records one call of the update and of
the iteration (and of PureJaxRL's whole run) with `jax.profiler` and adds their device
kernels to the JSON: each kernel's name, launches and microseconds per iteration, the
largest first, and the device's busy time. XLA's environment (`XLA_FLAGS`) is recorded
beside the figures.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import numpy as np
from _publish import parse_with_overrides, publish

from rlax_trpo.config import ControlFields
from rlax_trpo.config.configuration import load_config, raw_config
from rlax_trpo.normalization import Statistics, normalize_trajectory, observation_transform
from rlax_trpo.rollout import EnvCarry, collect
from rlax_trpo.training import acting_policy, make_trainer

KERNEL = re.compile(r"=\s*\S+\s+(fusion|custom-call|dot|convolution|all-reduce|sort)\(")
LAUNCH = re.compile(r"=\s*\S+\s+(fusion|custom-call|dot|convolution|all-reduce|sort|copy)\(")


def phases(trainer):
    """The iteration's phases as separate pure functions (the training loop's own pieces)."""
    config, env, networks, algorithm = (
        trainer.config,
        trainer.env,
        trainer.networks,
        trainer.algorithm,
    )
    rollout = algorithm.collect or collect

    def roll(state, key):
        transform = observation_transform(config.normalize_obs, state.obs_stats)
        policy = acting_policy(networks, state.params, transform)
        start = EnvCarry(state.env_state, state.obs, state.episode, state.memory, state.first)
        return rollout(env, policy, start, key, config.num_steps)

    def batch(state, ro, hp):
        stats = Statistics(state.obs_stats, state.return_stats, state.return_acc)
        traj, _ = normalize_trajectory(config, stats, ro.trajectory, ro.done, hp.gamma)
        return algorithm.make_batch(state.params, traj, hp)

    def update(state, learner_batch, hp, key):
        return algorithm.update(state.params, state.algo_state, learner_batch, hp, key)

    return roll, batch, update


def compiled_figures(compiled) -> dict:
    """XLA's cost analysis of a compiled program, and its kernels in the optimised HLO: as
    written (`kernels`, loop bodies once) and as run (`launches`, loop bodies times trips)."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost or {}
    text = compiled.as_text() or ""
    return {
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
        "kernels": len(KERNEL.findall(text)),
        "launches": kernel_launches(text),
    }


COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+)\s.*\{$")
WHILE = re.compile(r"\swhile\(.*condition=%?([\w.\-]+), body=%?([\w.\-]+)")
TRIPS = re.compile(r'known_trip_count":\{"n":"(\d+)"')
CALLED = re.compile(r"\s(?:call|conditional)\(.*(?:to_apply|branch_computations)=\{?([^}]*?)\}?,")


def kernel_launches(text: str) -> int | None:
    """Kernels one call of an optimised HLO module launches (`KERNEL`s and copies): each
    computation's own, a
    while loop's condition and body times its known trip count, a call's callee once and a
    conditional's costliest branch. None when a loop's trip count is not known."""
    comps: dict[str, list[str]] = {}
    entry = None
    for line in text.splitlines():
        m = COMPUTATION.match(line) if not line.startswith(" ") else None
        if m:
            comps[m.group(1)] = []
            entry = m.group(1) if line.startswith("ENTRY") else entry
        elif comps:
            comps[next(reversed(comps))].append(line)

    def launches(name: str) -> int | None:
        total = 0
        for line in comps.get(name, ()):
            total += bool(LAUNCH.search(line))
            if m := WHILE.search(line):
                trips = TRIPS.search(line)
                inner = [launches(m.group(1)), launches(m.group(2))]
                if trips is None or None in inner:
                    return None
                total += int(trips.group(1)) * sum(inner)
            elif m := CALLED.search(line):
                inner = [launches(c.strip().lstrip("%")) for c in m.group(1).split(",")]
                if None in inner:
                    return None
                total += max(inner)
        return total

    return launches(entry) if entry is not None else None


def timed(fn, args: tuple, repeats: int) -> dict:
    """Compile `fn` for `args`; the median seconds of `repeats` calls after one warm call."""
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        walls.append(time.perf_counter() - t0)
    return {"seconds": float(np.median(walls)), **compiled_figures(compiled)}


PHASES = ("rollout", "batch", "update", "iteration")


def device_kernels(fn, args: tuple, calls: int = 1, top: int = 25) -> dict:
    """One traced call of the compiled `fn(*args)`: its device kernels by total time.

    Reads the Chrome trace that `jax.profiler` writes beside its XPlane file; events of the
    processes whose name names a device (not the host) are kernels and copies. Times are
    microseconds per call (the call's time over `calls` when it runs several iterations)."""
    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as log_dir:
        with jax.profiler.trace(log_dir):
            jax.block_until_ready(fn(*args))
        traces = list(Path(log_dir).glob("plugins/profile/*/*.trace.json.gz"))
        if not traces:
            return {"error": "jax.profiler wrote no trace.json.gz"}
        with gzip.open(traces[0]) as fh:
            events = json.load(fh)["traceEvents"]
    names = {e["pid"]: e.get("args", {}).get("name", "") for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}  # fmt: skip
    device = {pid for pid, name in names.items() if "/device:" in name}
    if not device:
        return {"error": "no device in the trace", "processes": sorted(names.values())}
    per_kernel: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("ph") == "X" and e["pid"] in device and "dur" in e:
            k = per_kernel[e["name"]]
            k[0] += 1
            k[1] += float(e["dur"])
    ranked = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])
    return {
        "device_processes": sorted(names[p] for p in device),
        "busy_us": sum(v[1] for v in per_kernel.values()) / calls,
        "kernels": len(per_kernel),
        "launches": sum(v[0] for v in per_kernel.values()) / calls,
        "top": [
            {"name": n[:160], "launches": c / calls, "us": t / calls} for n, (c, t) in ranked[:top]
        ],  # fmt: skip
    }


def profile(config, repeats: int, which=PHASES, trace: bool = False) -> dict:
    """This library's phases and whole iteration at `config`'s width (those in `which`)."""
    trainer = make_trainer(config)
    hp = config.hp
    state = jax.jit(trainer.init)(jax.random.key(0), hp)
    roll, batch, update = phases(trainer)
    key = jax.random.key(1)
    ro = jax.jit(roll)(state, key)
    learner = jax.jit(batch)(state, ro, hp)
    calls = {
        "rollout": (roll, (state, key)),
        "batch": (batch, (state, ro, hp)),
        "update": (update, (state, learner, hp, key)),
        "iteration": (trainer.iteration, (state, hp)),
    }
    out = {phase: timed(*calls[phase], repeats) for phase in PHASES if phase in which}
    if "iteration" in out:
        out["env_steps_per_second"] = config.batch_size / out["iteration"]["seconds"]
    if trace:
        out["update_kernels"] = device_kernels(jax.jit(update), calls["update"][1])
        out["iteration_kernels"] = device_kernels(jax.jit(trainer.iteration), (state, hp))
    return out


def purejaxrl_iteration(module, config, repeats: int, trace: bool = False) -> dict:
    """PureJaxRL's seconds per iteration: its whole run at `config`'s sizes over its
    iterations (compile excluded); with `trace`, its kernels per iteration."""
    import _purejaxrl

    fn, keys, steps = _purejaxrl.make_run(module, config, 1)
    compiled = fn.lower(keys).compile()
    jax.block_until_ready(compiled(keys))
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(keys))
        walls.append(time.perf_counter() - t0)
    iterations = steps // config.batch_size
    seconds = float(np.median(walls)) / iterations
    figures = compiled_figures(compiled)
    out = {
        "seconds": seconds,
        "env_steps_per_second": config.batch_size / seconds,
        **figures,
        "launches_per_iteration": figures["launches"] / iterations if figures["launches"] else None,
        "kernels_note": "the whole run's program (its loop bodies once), not one iteration's",
    }
    if trace:
        out["iteration_kernels"] = device_kernels(compiled, (keys,), calls=iterations)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="ppo_cartpole_purejaxrl")
    p.add_argument("--num-envs", type=int, nargs="+", default=[16384, 131072])
    p.add_argument("--iterations", type=int, default=4, help="of PureJaxRL's timed run")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--purejaxrl", type=Path, metavar="PPO_PY")
    p.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    p.add_argument("--trace", action="store_true", help="add the update's device kernels")
    p.add_argument("--json", type=Path)
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = parse_with_overrides(p, argv)
    if any(n < 1 for n in args.num_envs) or args.iterations < 1 or args.repeats < 1:
        p.error("--num-envs, --iterations and --repeats: positive integers")
    if args.purejaxrl is not None and not args.purejaxrl.is_file():
        p.error(f"--purejaxrl: {str(args.purejaxrl)!r} does not exist")
    module = None
    if args.purejaxrl is not None:
        import _purejaxrl

        module = _purejaxrl.load(args.purejaxrl)
    from throughput import env_only_steps_per_second

    results = []
    for width in args.num_envs:
        raw = raw_config(args.config, [*args.overrides, f"num_envs={width}"])
        steps = raw.get("num_steps", ControlFields.model_fields["num_steps"].default)
        total = args.iterations * width * int(steps)
        config = load_config(None, base={**raw, "total_env_steps": total})
        line = {
            "num_envs": width,
            "num_steps": config.num_steps,
            "overrides": args.overrides,
            "ours": profile(config, args.repeats, args.phases, args.trace),
        }
        if module is not None:
            line["purejaxrl"] = purejaxrl_iteration(module, config, args.repeats, args.trace)
        line["env_only_random_steps_per_second"] = env_only_steps_per_second(
            config.env, width, config.num_steps, total
        )
        print(line, flush=True)
        results.append(line)
    header = {
        "device": jax.devices()[0].device_kind,
        "backend": jax.default_backend(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    publish("profile_ppo", {**header, "config": args.config, "results": results}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
