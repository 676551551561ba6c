#!/usr/bin/env python
"""TRPO on CartPole-v1: this library (one jitted scan) against sb3-contrib (PyTorch), same run.

    python benchmarks/trpo_vs_sb3.py [--steps 100000] [--seeds 8] [--no-sb3] [--json out.json]

Both use the RL Zoo CartPole configuration as configs/trpo_cartpole.yaml writes it: 2 envs x
512 steps, 100k steps, gamma 0.99, lambda 0.98, max KL 0.01, CG damping 0.1, 15 CG
iterations, line search 10 x 0.8, separate 64-64 tanh policy and value networks, critic
fitted by 20 epochs of minibatch 128 with Adam lr 1e-3, advantages normalised.

Printed: env steps/s of each (ours: compile excluded and reported apart), their ratio, the
return each reaches (mean training-episode return at the end of training, and a greedy /
deterministic evaluation of 10 episodes), then `--seeds` seeds of ours through `train.py`'s
path (`rlax_trpo.run`: the population sharded over one CPU device per core), against sb3
with torch using as many threads as there are cores (`--torch-threads`).
sb3-contrib is the `compare` extra: `pip install -e ".[compare]"`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

from rlax_trpo.platform import setup_cpu

setup_cpu()  # before JAX starts: one CPU device per core (rlax_trpo/platform.py)

import jax
import numpy as np

from rlax_trpo import load_config, make_trainer, run
from rlax_trpo.evaluate import make_evaluate
from rlax_trpo.report.stats import final_returns, to_numpy

ROOT = Path(__file__).resolve().parents[1]
EVAL_EPISODES = 10


def run_ours(steps: int, seeds: int, seed: int = 0) -> dict:
    config = load_config(ROOT / "configs" / "trpo_cartpole.yaml", [f"total_env_steps={steps}"])
    trainer = make_trainer(config)
    evaluate = make_evaluate(config, trainer.env, trainer.networks, EVAL_EPISODES)
    keys = jax.random.split(jax.random.key(seed), seeds)
    train = jax.jit(jax.vmap(trainer.train, in_axes=(0, None)))
    t0 = time.perf_counter()
    compiled = train.lower(keys, config.hp).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, metrics = compiled(keys, config.hp)
    jax.block_until_ready(metrics)
    wall = time.perf_counter() - t0
    eval_returns = np.asarray(jax.jit(jax.vmap(evaluate))(state, keys))
    m = to_numpy(metrics)
    done = config.num_iterations * config.batch_size
    return {
        "seeds": seeds,
        "env_steps_per_seed": done,
        "wall_seconds": wall,
        "compile_seconds": compile_s,
        "env_steps_per_second": done * seeds / wall,
        "final_return_per_seed": final_returns(m).tolist(),
        "final_return_mean": float(np.nanmean(final_returns(m))),
        "eval_return_mean": float(eval_returns.mean()),
        "accepted_fraction": float(m["trpo/accepted"].mean()),
    }


def run_ours_all_cores(steps: int, seeds: int) -> dict:
    """`train.py --config configs/trpo_cartpole.yaml --seeds N`, in process (all cores)."""
    import tempfile

    config = load_config(ROOT / "configs" / "trpo_cartpole.yaml", [f"total_env_steps={steps}"])
    with tempfile.TemporaryDirectory() as tmp:
        s = run(config, seeds=seeds, out=Path(tmp) / "run", progress=False).summary
    return {
        "seeds": seeds,
        "num_devices": s["num_devices"],
        "env_steps_per_seed": s["total_env_steps"],
        "wall_seconds": s["wall_seconds"],
        "compile_seconds": s["compile_seconds"],
        "env_steps_per_second": s["env_steps_per_second"],
        "final_return_per_seed": s["final_return_per_seed"],
        "final_return_mean": s["final_return_mean"],
        "eval_return_mean": s["eval_return_mean"],
    }


def run_sb3(steps: int, seed: int = 0, threads: int = 1) -> dict:
    import torch

    # SB3 advises one thread for small MLPs on CPU; the all-cores comparison gives it all.
    torch.set_num_threads(threads)
    from sb3_contrib import TRPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    env = make_vec_env("CartPole-v1", n_envs=2, seed=seed)
    model = TRPO(
        "MlpPolicy",
        env,
        n_steps=512,
        batch_size=128,
        gamma=0.99,
        gae_lambda=0.98,
        n_critic_updates=20,
        learning_rate=1e-3,
        target_kl=0.01,
        cg_damping=0.1,
        cg_max_steps=15,
        line_search_shrinking_factor=0.8,
        line_search_max_iter=10,
        normalize_advantage=True,
        seed=seed,
        verbose=0,
        device="cpu",
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - t0
    # The last 100 finished training episodes (Monitor buffer) and a deterministic evaluation.
    final = float(np.mean([ep["r"] for ep in model.ep_info_buffer]))
    eval_mean, _ = evaluate_policy(
        model,
        make_vec_env("CartPole-v1", n_envs=1, seed=seed + 1),
        n_eval_episodes=EVAL_EPISODES,
        deterministic=True,
    )
    return {
        "env_steps": int(model.num_timesteps),
        "wall_seconds": wall,
        "env_steps_per_second": model.num_timesteps / wall,
        "final_return_mean": final,
        "eval_return_mean": float(eval_mean),
        "torch_threads": torch.get_num_threads(),
    }


def _plain(x):
    """numpy arrays and scalars as JSON lists and numbers."""
    return x.tolist() if hasattr(x, "tolist") else str(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=8, help="seeds of ours, sharded over all cores")
    p.add_argument("--no-sb3", action="store_true", help="skip sb3-contrib")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch CPU threads (default: one per core)",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()

    print("measuring ... (sb3-contrib takes about 40 s on an idle 2-core CPU)", flush=True)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {load}, jax {jax.__version__} on {jax.devices()[0].platform}"
    )
    results: dict = {"load_average": load, "cpu_count": os.cpu_count()}
    ours = run_ours(args.steps, 1)
    results["ours_1_seed"] = ours
    print(
        f"rlax_trpo TRPO, 1 seed : {ours['env_steps_per_second']:>10,.0f} env steps/s "
        f"({ours['wall_seconds']:.2f} s + {ours['compile_seconds']:.1f} s compile), "
        f"final return {ours['final_return_mean']:.1f}, greedy eval "
        f"{ours['eval_return_mean']:.1f}"
    )
    if not args.no_sb3:
        sb3 = run_sb3(args.steps, threads=args.torch_threads)
        results["sb3_contrib"] = sb3
        ratio = ours["env_steps_per_second"] / sb3["env_steps_per_second"]
        results["speedup_1_seed"] = ratio
        print(
            f"sb3-contrib TRPO       : {sb3['env_steps_per_second']:>10,.0f} env steps/s "
            f"({sb3['wall_seconds']:.1f} s, torch {sb3['torch_threads']} threads), "
            f"final return {sb3['final_return_mean']:.1f}, deterministic eval "
            f"{sb3['eval_return_mean']:.1f}"
        )
        sb3_s = sb3["wall_seconds"] * ours["env_steps_per_seed"] / sb3["env_steps"]  # same steps
        whole = sb3_s / (ours["wall_seconds"] + ours["compile_seconds"])
        results["speedup_1_seed_with_compile"] = whole
        print(f"speed ratio (1 seed vs 1 agent): {ratio:.1f}x; {whole:.1f}x counting compilation")
    if args.seeds > 1:
        many = run_ours_all_cores(args.steps, args.seeds)
        results[f"ours_{args.seeds}_seeds"] = many
        finals = np.asarray(many["final_return_per_seed"])
        print(
            f"rlax_trpo TRPO, {args.seeds} seeds on {many['num_devices']} devices: "
            f"{many['env_steps_per_second']:,.0f} "
            f"env steps/s in total ({many['wall_seconds']:.2f} s + "
            f"{many['compile_seconds']:.1f} s compile); final return "
            f"{np.nanmean(finals):.1f} +- {np.nanstd(finals):.1f} "
            f"(min {np.nanmin(finals):.1f}), {int((finals >= 475).sum())}/{args.seeds} "
            f"seeds >= 475; greedy eval {many['eval_return_mean']:.1f}"
        )
        if "sb3_contrib" in results:
            r = many["env_steps_per_second"] / results["sb3_contrib"]["env_steps_per_second"]
            results[f"speedup_{args.seeds}_seeds"] = r
            sb3_s = results["sb3_contrib"]["wall_seconds"] * many["env_steps_per_seed"] * args.seeds
            sb3_s /= results["sb3_contrib"]["env_steps"]  # sb3 training the seeds one by one
            whole = sb3_s / (many["wall_seconds"] + many["compile_seconds"])
            results[f"speedup_{args.seeds}_seeds_with_compile"] = whole
            print(
                f"speed ratio ({args.seeds} seeds on all cores vs 1 sb3 agent): {r:.1f}x; "
                f"{whole:.1f}x counting compilation ({args.seeds} sb3 runs one after another)"
            )
    results.update(date=datetime.date.today().isoformat(), jax=jax.__version__,
                   command="python " + " ".join(sys.argv))  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=_plain) + "\n")


if __name__ == "__main__":
    main()
