#!/usr/bin/env python
"""Jumanji's own A2C (`jumanji/training`, shipped with jumanji) on one task, as a reference run.

Jumanji ships an A2C agent, a network and a config per environment in `jumanji/training`,
driven by `jumanji/training/train.py` (a Hydra entry point). This script builds that agent
with the package's own `setup_train` functions from the package's own YAML for the task, and
runs the loop `train.py` runs: per epoch, `num_learner_steps_per_epoch` calls of
`agent.run_epoch` under `jax.lax.scan` in a `jax.pmap`, evaluated with the package's own
stochastic `Evaluator`. Nothing of the agent, its network, its loss or its hyperparameters is
changed; Hydra is not needed (the YAML files are read with omegaconf), and the logger
backends that `jumanji.training.loggers` imports but this script never uses (neptune,
tensorboardX) are stood in for by empty modules where they are not installed. The packages
the agent needs and the project does not install go to a folder of their own:

    pip install --target DIR dm-haiku rlax omegaconf
    PYTHONPATH=DIR python benchmarks/jumanji_a2c.py --env knapsack [--epochs N] [--seed 1000]
        [--eval-episodes E] [--json FILE]

The budget: Jumanji's config gives `num_epochs` epochs of `num_learner_steps_per_epoch x n_steps
x total_batch_size` env steps; `--epochs N` runs the first N of them (a stated fraction of the
config's budget). Its evaluation (`eval_total_batch_size` episodes of the stochastic policy) is
run after every `--eval-every` epochs and after the last; `--eval-episodes` sets its size.

Printed and written (`--json`, readable by `rlax-trpo report` beside our run folders): the
final score, the mean episode return of its stochastic evaluations over the last 10% of epochs
(at least the one after the last epoch), as `summary.final_return_per_seed`; the greedy
evaluation after the last epoch; the evaluation curve; the wall time.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import math
import sys
import time
import types
from pathlib import Path

from _publish import publish

ABSENT_LOGGERS = ("neptune", "tensorboardX")  # imported by jumanji.training.loggers, unused here


def missing_packages() -> list[str]:
    names = ("haiku", "rlax", "omegaconf")
    return [name for name in names if importlib.util.find_spec(name) is None]


def stand_in_loggers() -> None:
    """Empty modules for the logger backends `jumanji.training.loggers` imports at its top."""
    for name in ABSENT_LOGGERS:
        if importlib.util.find_spec(name) is None:
            module = types.ModuleType(name)
            sys.modules[name] = module
            if name == "neptune":  # `from neptune import new as neptune`
                module.new = sys.modules["neptune.new"] = types.ModuleType("neptune.new")
            if name == "tensorboardX":  # `from tensorboardX import SummaryWriter`
                module.SummaryWriter = object


def restore_device_put_replicated() -> None:
    """`setup_train` calls `jax.device_put_replicated`, which the jax installed here no longer
    has: where it is absent, its documented meaning (each leaf stacked once per device, the
    leading axis a `pmap` splits) stands in for it."""
    import jax
    import jax.numpy as jnp

    try:
        jax.device_put_replicated  # noqa: B018
    except AttributeError:
        jax.device_put_replicated = lambda tree, devices: jax.tree.map(
            lambda x: jnp.stack([jnp.asarray(x)] * len(devices)), tree
        )


def task_names() -> list[str]:
    import jumanji.training

    folder = Path(jumanji.training.__file__).parent / "configs" / "env"
    return sorted(p.stem for p in folder.glob("*.yaml"))


def jumanji_config(env: str, seed: int, eval_episodes: int | None):
    """The config `train.py` composes for `agent=a2c env=ENV seed=SEED` (its config.yaml's
    defaults with the env's YAML), with the evaluation's size set when given."""
    import jumanji.training
    from omegaconf import OmegaConf

    folder = Path(jumanji.training.__file__).parent / "configs"
    cfg = OmegaConf.create(
        {
            "agent": "a2c",
            "seed": seed,
            "logger": {"type": "terminal", "save_checkpoint": False, "name": f"a2c_{env}"},
            "env": OmegaConf.load(folder / "env" / f"{env}.yaml"),
        }
    )
    if eval_episodes is not None:
        cfg.env.evaluation.eval_total_batch_size = eval_episodes
        cfg.env.evaluation.greedy_eval_total_batch_size = eval_episodes
    return cfg


def run(cfg, epochs: int, eval_every: int) -> dict:
    """train.py's loop for `epochs` epochs; the stochastic evaluations' returns by epoch."""
    import jax
    import jax.numpy as jnp
    from jumanji.training import setup_train, utils

    key, init_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    env = setup_train.setup_env(cfg)
    agent = setup_train.setup_agent(cfg, env)
    stochastic_eval, greedy_eval = setup_train.setup_evaluators(cfg, agent)
    state = setup_train.setup_training_state(env, agent, init_key)
    steps = cfg.env.training.num_learner_steps_per_epoch

    @functools.partial(jax.pmap, axis_name="devices")  # as train.py
    def epoch_fn(training_state):
        training_state, metrics = jax.lax.scan(
            lambda s, _: agent.run_epoch(s), training_state, None, steps
        )
        return training_state, jax.tree.map(jnp.mean, metrics)

    last = max(1, math.ceil(0.1 * epochs))
    curve, start = {}, time.perf_counter()
    for epoch in range(1, epochs + 1):
        state, metrics = epoch_fn(state)
        jax.block_until_ready(state)
        if epoch % eval_every == 0 or epoch > epochs - last:
            key, k = jax.random.split(key)
            ev = utils.first_from_device(stochastic_eval.run_evaluation(state.params_state, k))
            curve[epoch] = float(ev["episode_return"])
            took = time.perf_counter() - start
            print(f"epoch {epoch}/{epochs} ({took:.0f} s): stochastic evaluation "
                  f"{curve[epoch]:.4f}", flush=True)  # fmt: skip
    key, k = jax.random.split(key)
    greedy = utils.first_from_device(greedy_eval.run_evaluation(state.params_state, k))
    final = [curve[e] for e in range(epochs - last + 1, epochs + 1)]
    return {
        "curve": curve,
        "final": sum(final) / len(final),
        "final_epochs": last,
        "greedy": float(greedy["episode_return"]),
        "wall": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True, help="a config of jumanji/training/configs/env")
    p.add_argument("--epochs", type=int, help="epochs to run (default: the config's num_epochs)")
    p.add_argument("--seed", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=1, help="epochs between evaluations")
    p.add_argument("--eval-episodes", type=int, help="episodes per evaluation (default: config's)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    missing = missing_packages()
    if missing:
        print(f"jumanji_a2c.py: Jumanji's training code needs {', '.join(missing)}: "
              "pip install --target DIR dm-haiku rlax omegaconf, then PYTHONPATH=DIR",
              file=sys.stderr)  # fmt: skip
        return 2
    stand_in_loggers()
    restore_device_put_replicated()
    if args.env not in task_names():
        print(f"jumanji_a2c.py: --env {args.env}: not one of {', '.join(task_names())}",
              file=sys.stderr)  # fmt: skip
        return 2
    for flag, value in (("--epochs", args.epochs), ("--eval-every", args.eval_every),
                        ("--eval-episodes", args.eval_episodes)):  # fmt: skip
        if value is not None and value < 1:
            print(f"jumanji_a2c.py: {flag} must be at least 1 (got {value})", file=sys.stderr)
            return 2
    from omegaconf import OmegaConf

    cfg = jumanji_config(args.env, args.seed, args.eval_episodes)
    training = cfg.env.training
    epochs = args.epochs or training.num_epochs
    per_epoch = training.num_learner_steps_per_epoch * training.n_steps * training.total_batch_size
    out = run(cfg, epochs, args.eval_every)
    task = f"jumanji/{cfg.env.registered_version}"
    steps = epochs * per_epoch
    publish(
        "jumanji_a2c",
        {
            "task": task,
            "algorithm": "jumanji_a2c",
            "reference": "jumanji/training's A2C (its agent, network and config), trained here",
            "jumanji": importlib.metadata.version("jumanji"),
            "config_budget_env_steps": training.num_epochs * per_epoch,
            "epochs": epochs,
            "config_epochs": training.num_epochs,
            "eval_episodes": cfg.env.evaluation.eval_total_batch_size,
            "wall_seconds_with_compile": round(out["wall"], 1),
            "stochastic_eval_return_by_epoch": {
                str(k): round(v, 4) for k, v in out["curve"].items()
            },
            "final_epochs": out["final_epochs"],
            "greedy_eval_return": round(out["greedy"], 4),
            # the settings (all but the seed), by which `rlax-trpo report` pools seeds' files
            "config": {"env": OmegaConf.to_container(cfg.env), "epochs": epochs},
            "summary": {
                "algorithm": "jumanji_a2c",
                "env": task,
                "seed": args.seed,
                "total_env_steps": steps,
                "final_return_per_seed": [out["final"]],
            },
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
