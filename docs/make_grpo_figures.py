"""Figures of docs/grpo_results.md from `train.py` run folders (host-only, matplotlib).

python docs/make_grpo_figures.py --qa runs/qa --kl runs/ppo_kla
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

OUT = Path(__file__).resolve().parent / "figures"


def qa_figure(run: Path) -> None:
    m = pd.read_csv(run / "metrics.csv")
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for seed, d in m.groupby("seed"):
        ax.plot(d["env_steps"], d["episode/return"], lw=0.8, label=f"seed {seed}")
    ax.axhline(0.95, color="k", ls="--", lw=0.7, label="0.95")
    ax.axhline(0.1, color="grey", ls=":", lw=0.7, label="random answer")
    ax.set_xlabel("env steps (answers)")
    ax.set_ylabel("mean reward per iteration")
    ax.set_title("GRPO on MaxDigit-qa (configs/grpo_qa_bandit.yaml)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "grpo_qa_bandit.png", dpi=110)


def kl_figure(run: Path, target: float = 0.01) -> None:
    m = pd.read_csv(run / "metrics.csv")
    fig, axes = plt.subplots(3, 1, figsize=(6.5, 7), sharex=True)
    seed0 = m[m.seed == 0]
    x = seed0["env_steps"]
    axes[0].semilogy(
        x,
        seed0["ppo/kl_after_update"].clip(lower=1e-6),
        ".",
        ms=2,
        label="d = KL(old || new) after update",
    )
    axes[0].axhspan(
        target / 1.5,
        target * 1.5,
        color="green",
        alpha=0.15,
        label="keep-beta band [d_targ/1.5, 1.5 d_targ]",
    )
    axes[0].legend(fontsize=7)
    axes[1].semilogy(x, seed0["ppo/kl_beta"].clip(lower=1e-6), lw=0.8)
    axes[1].set_ylabel("beta (seed 0)")
    for seed, d in m.groupby("seed"):
        axes[2].plot(d["env_steps"], d["episode/return"], lw=0.6, label=f"seed {seed}")
    axes[2].axhline(475, color="k", ls="--", lw=0.7)
    axes[2].set_ylabel("episode return")
    axes[2].set_xlabel("env steps")
    axes[2].legend(fontsize=7)
    axes[0].set_title(
        "PPO adaptive KL on CartPole-v1 (configs/ppo_kl_adaptive_cartpole.yaml)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(OUT / "ppo_kl_adaptive.png", dpi=110)
    # Check the rule on every logged iteration of every seed.
    ok = []
    for _, d in m.groupby("seed"):
        b, kl = d["ppo/kl_beta"].to_numpy(), d["ppo/kl_after_update"].to_numpy()
        prev = np.concatenate([[1.0], b[:-1]])
        exp = np.where(kl < target / 1.5, prev / 2, prev)
        exp = np.where(kl > 1.5 * target, exp * 2, exp)
        ok.append(np.isclose(b, exp, rtol=1e-6).mean())
    print("fraction of iterations where the logged beta follows the rule, per seed:", ok)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--qa", type=Path)
    p.add_argument("--kl", type=Path)
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.qa:
        qa_figure(args.qa)
    if args.kl:
        kl_figure(args.kl)
