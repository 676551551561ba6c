#!/usr/bin/env python
"""Craftax's own PPO baseline (Craftax_Baselines `ppo.py`) at a budget, as a reference run.

The Craftax scoreboard's Craftax-1M figures (PPO 2.2%, PPO-RNN 2.3% of the maximum return,
226) are in Craftax's README since release 1.0.0 (credited there to PureJaxRL, in later
releases to this code). This script trains that code, as written, on the Craftax installed
here, so that `ppo_craftax` can be compared with its reference on the same environment
version (an older release installed with `pip install --no-deps --target DIR craftax==1.4.5
gymnax==0.0.9` and `PYTHONPATH=DIR` runs it on that release):

    python benchmarks/craftax_baselines.py --baselines PATH [--steps 1000000] [--seeds 1]
        [--json FILE]

PATH is a clone of MichaelTMatthews/Craftax_Baselines (a bare git directory or a work tree);
its code is not part of this repository. Its `ppo.py`, `models/`, `logz/` and `wrappers.py`
are copied to a scratch folder and imported there unchanged. Its training loop reports each
update's episode figures through `logz.batch_logging.batch_log` (the W&B path, on with
`DEBUG` and `USE_WANDB`); here that one function is replaced by one that keeps the figures
in memory, so nothing is sent anywhere. Its defaults are those of its command line: 1024
envs x 64 steps, 4 epochs x 8 minibatches, lr 2e-4 annealed, GAE lambda 0.8, three tanh
layers of 512, optimistic resets with ratio 16.

Printed and written (`--json`): per update the mean return of the episodes that finished in
it (averaged over seeds), and per seed the final score, the mean of the last 10% of updates'
returns (at least one update), as a percentage of 226 — the unit of `summary.json`'s
`final_episode_figures_per_seed.score_percent` for `ppo_craftax`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import math
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from _publish import publish

MAX_RETURN = 226.0  # Craftax-Symbolic's maximum return (the scoreboard's 100%)
FILES = ("ppo.py", "wrappers.py", "models", "logz")


def scratch_copy(clone: Path) -> Path:
    """Craftax_Baselines' files needed by `ppo.py`, copied to a fresh folder."""
    out = Path(tempfile.mkdtemp(prefix="craftax_baselines_"))
    if (clone / "ppo.py").is_file():
        for name in FILES:
            src = clone / name
            (shutil.copytree if src.is_dir() else shutil.copy)(src, out / name)
        return out
    # a bare git directory (benchmarks' `fetch` mirrors)
    archive = subprocess.run(["git", "--git-dir", str(clone), "archive", "HEAD", *FILES],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "x", "-C", str(out)], input=archive, check=True)
    return out


def config(steps: int, seeds: int, seed: int) -> dict:
    """ppo.py's command-line defaults (its argparse), with the budget and seeds given."""
    return {
        "ENV_NAME": "Craftax-Symbolic-v1", "NUM_ENVS": 1024, "TOTAL_TIMESTEPS": steps,
        "LR": 2e-4, "NUM_STEPS": 64, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 8, "GAMMA": 0.99,
        "GAE_LAMBDA": 0.8, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5,
        "MAX_GRAD_NORM": 1.0, "ACTIVATION": "tanh", "ANNEAL_LR": True, "DEBUG": True,
        "JIT": True, "SEED": seed, "USE_WANDB": True, "SAVE_POLICY": False,
        "NUM_REPEATS": seeds, "LAYER_SIZE": 512, "USE_OPTIMISTIC_RESETS": True,
        "OPTIMISTIC_RESET_RATIO": 16, "EXPLORATION_UPDATE_EPOCHS": 4, "ICM_REWARD_COEFF": 1.0,
        "TRAIN_ICM": False, "ICM_LR": 3e-4, "ICM_FORWARD_LOSS_COEF": 1.0,
        "ICM_INVERSE_LOSS_COEF": 1.0, "ICM_LAYER_SIZE": 256, "ICM_LATENT_SIZE": 32,
        "E3B_REWARD_COEFF": 1.0, "USE_E3B": False, "E3B_LAMBDA": 0.1, "USE_RND": False,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baselines", type=Path, required=True, help="a Craftax_Baselines clone")
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps per seed")
    p.add_argument("--seeds", type=int, default=1, help="seeds, vmapped as ppo.py does")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if not args.baselines.exists():
        print(f"craftax_baselines.py: --baselines {args.baselines}: no such folder",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.steps < 1024 * 64 or args.seeds < 1:
        print("craftax_baselines.py: --steps must be at least one update (65536) and --seeds "
              "at least 1", file=sys.stderr)  # fmt: skip
        return 2
    import jax

    sys.path.insert(0, str(scratch_copy(args.baselines)))
    if importlib.util.find_spec("wandb") is None:
        # ppo.py and logz import wandb; the one function that uses it is replaced below, so
        # where it is not installed (the GPU image) an empty module stands in for it
        sys.modules["wandb"] = types.ModuleType("wandb")
    ppo = importlib.import_module("ppo")
    logs: dict[int, list[dict]] = {}

    def keep(update_step, log, cfg):  # in place of logz.batch_logging.batch_log (W&B)
        logs.setdefault(int(update_step), []).append({k: float(v) for k, v in log.items()})

    ppo.batch_log = keep
    cfg = config(args.steps, args.seeds, args.seed)
    train = jax.jit(jax.vmap(ppo.make_train(dict(cfg))))
    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.seeds)
    start = time.time()
    jax.block_until_ready(train(keys))
    wall = time.time() - start
    updates = sorted(logs)
    per_seed = [[logs[u][s]["episode_return"] for u in updates] for s in range(args.seeds)]
    last = max(1, math.ceil(0.1 * len(updates)))
    finals = [100.0 * sum(r[-last:]) / last / MAX_RETURN for r in per_seed]
    mean_curve = [sum(r[i] for r in per_seed) / args.seeds for i in range(len(updates))]
    publish(
        "craftax_baselines",
        {
            "reference": "Craftax_Baselines ppo.py (its command-line defaults), trained here",
            "craftax": importlib.metadata.version("craftax"),
            "gymnax": importlib.metadata.version("gymnax"),
            "env_steps_per_seed": len(updates) * 1024 * 64,
            "seeds": args.seeds,
            "updates": len(updates),
            "wall_seconds_with_compile": round(wall, 1),
            "episode_return_per_update": [round(x, 4) for x in mean_curve],
            "final_updates": last,
            "score_percent_per_seed": finals,
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
