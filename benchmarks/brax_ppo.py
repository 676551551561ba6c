"""Brax's own PPO beside this library's PPO: same environment, same env-step budget,
comparable settings, one invocation.

    pip install -e ".[brax,playground]"
    python benchmarks/brax_ppo.py                                   # both environments
    python benchmarks/brax_ppo.py --envs playground/CartpoleBalance --steps 1000000
    python benchmarks/brax_ppo.py --json benchmarks/results/brax_ppo_2core.json

For each environment it trains this library's PPO with the bundled config
(`ppo_playground_cartpole_balance`, `ppo_brax_inverted_pendulum`), then
`brax.training.agents.ppo` with the same settings, and
prints one JSON line per environment with `env`, `budget`, `ours_return`, `brax_return`,
`ours_env_steps_per_second`, `brax_env_steps_per_second`, `ours_wall_seconds` and
`brax_wall_seconds`.

Settings: Brax gets ours where both have them: the same number of parallel environments,
env steps per update (`batch_size x num_minibatches x unroll_length` = `num_envs x
num_steps`, with `unroll_length = num_steps` and whole environments per minibatch), epochs
(`num_updates_per_batch`), minibatches, learning rate, discount, GAE lambda, clip range,
gradient-norm clip, entropy cost, observation normalisation, 64-64 networks for policy and
value, and bootstrapping on time limits (`bootstrap_on_timeout=True`). What stays each
library's own: Brax's tanh-squashed Gaussian and constant learning rate, our clipped
Gaussian with learning-rate annealing and reward normalisation, and minibatches of whole
trajectories (Brax) or of shuffled steps (ours).

Returns: both are the deterministic (greedy) policy after training, averaged over episodes
of up to 1000 steps (Brax: `eval/episode_reward` over `--eval-envs` episodes; ours:
`eval_return_mean`, the config's `eval_episodes`). Speed: Brax's own `training/sps` of its
last training epoch (evaluation and compilation excluded) and ours from `summary.json`
(compilation excluded); wall seconds include compilation and evaluation for both. Both run
on one JAX CPU device (XLA's threads use every core).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

from _publish import publish

from rlax_trpo.platform import setup_cpu

CONFIGS = {
    "playground/CartpoleBalance": "ppo_playground_cartpole_balance",
    "brax/inverted_pendulum": "ppo_brax_inverted_pendulum",
}


def brax_environment(name: str):
    """Brax's PPO trains on the suite's own environment, wrapped its own way."""
    suite, task = name.split("/", 1)
    if suite == "playground":
        from mujoco_playground import registry, wrapper

        return registry.load(task, config_overrides={"impl": "jax"}), wrapper.wrap_for_brax_training
    from brax import envs

    return envs.get_environment(task), None


def _brax_on_this_jax() -> None:
    """Brax 0.14.2 calls `jax.device_put_replicated`, which jax 0.10 removed; this is the
    drop-in replacement from jax's pmap migration notes (a leading device axis, sharded)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if "device_put_replicated" in vars(jax):
        return

    def device_put_replicated(x, devices):
        mesh = jax.sharding.Mesh(np.array(devices), ("d",))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
        stack = lambda a: jax.device_put(jnp.stack([jnp.asarray(a)] * len(devices)), sharding)
        return jax.tree.map(stack, x)

    jax.device_put_replicated = device_put_replicated


def run_brax(name: str, config, steps: int, eval_envs: int) -> dict:
    _brax_on_this_jax()
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    env, wrap = brax_environment(name)
    hp = config.hp
    progress = []
    t0 = time.perf_counter()
    ppo.train(
        environment=env,
        wrap_env_fn=wrap,
        num_timesteps=steps,
        num_envs=config.num_envs,
        episode_length=1000,
        unroll_length=config.num_steps,
        batch_size=config.num_envs // config.num_minibatches,
        num_minibatches=config.num_minibatches,
        num_updates_per_batch=config.num_epochs,
        learning_rate=float(hp.learning_rate),
        entropy_cost=float(hp.ent_coef),
        discounting=float(hp.gamma),
        gae_lambda=float(hp.gae_lambda),
        clipping_epsilon=float(hp.clip_eps),
        max_grad_norm=float(hp.max_grad_norm),
        normalize_observations=config.normalize_obs,
        bootstrap_on_timeout=True,
        network_factory=functools.partial(
            ppo_networks.make_ppo_networks,
            policy_hidden_layer_sizes=tuple(config.hidden_sizes),
            value_hidden_layer_sizes=tuple(config.hidden_sizes),
        ),
        num_evals=2,
        num_eval_envs=eval_envs,
        deterministic_eval=True,
        seed=0,
        progress_fn=lambda step, metrics: progress.append((step, dict(metrics))),
    )
    wall = time.perf_counter() - t0
    last = progress[-1][1]
    return {
        "brax_return": float(last["eval/episode_reward"]),
        "brax_env_steps_per_second": float(last["training/sps"]),
        "brax_wall_seconds": wall,
        "brax_env_steps": int(progress[-1][0]),
    }


def run_ours(config_name: str, steps: int) -> dict:
    from rlax_trpo import load_config, run

    config = load_config(config_name, [f"total_env_steps={steps}"])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = run(config, seeds=1, out=Path(tmp) / "run", progress=False)
        wall = time.perf_counter() - t0
    s = result.summary
    return {
        "ours_return": s["eval_return_mean"],
        "ours_final_training_return": s["final_return_mean"],
        "ours_env_steps_per_second": s["env_steps_per_second"],
        "ours_wall_seconds": wall,
        "ours_env_steps": s["total_env_steps"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per library")
    parser.add_argument("--eval-envs", type=int, default=16, help="Brax's evaluation episodes")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    setup_cpu(1)
    from rlax_trpo import load_config

    lines = []
    for name in args.envs:
        config = load_config(CONFIGS[name], [f"total_env_steps={args.steps}"])
        line = {"env": name, "budget": args.steps, "config": CONFIGS[name]}
        line.update(run_ours(CONFIGS[name], args.steps))
        line.update(run_brax(name, config, args.steps, args.eval_envs))
        line["return_ratio"] = line["ours_return"] / max(line["brax_return"], 1e-9)
        line["speed_ratio"] = line["ours_env_steps_per_second"] / line["brax_env_steps_per_second"]
        print(json.dumps(line), flush=True)
        lines.append(line)
    publish("brax_ppo", {"results": lines}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
