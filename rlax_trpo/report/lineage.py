"""Population-based training in a run's files: the best agent's history (`pbt_lineage`, for
summary.json) and `pbt.png` (`plot_pbt`): every member's return and explored values over
the run, the best agent's path through the members drawn over them. Host-side numpy and
matplotlib only."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def pbt_lineage(metrics: Mapping[str, np.ndarray], finals: np.ndarray) -> dict[str, Any] | None:
    """A PBT run's best member (highest final return) and the history of the agent it holds:
    which member trained it at each iteration (`pbt/parent` followed back from the end: at a
    step, the member that copied trained as its parent before) and the explored values it
    trained with (`hp/NAME`), each as `[iteration, value]` pairs where it changes. None for a
    run without PBT."""
    if "pbt/parent" not in metrics:
        return None
    parent = np.asarray(metrics["pbt/parent"]).astype(np.int64)  # [P, T]
    best = int(np.argmax(np.where(np.isfinite(finals), finals, -np.inf)))
    holder = agent_path(parent, best)
    names = sorted(k.removeprefix("hp/") for k in metrics if k.startswith("hp/"))
    columns = np.arange(parent.shape[1])
    return {
        "best_member": best,
        "lineage": _changes(holder.tolist()),
        "schedule": {n: _changes(metrics[f"hp/{n}"][holder, columns].tolist()) for n in names},
        "steps": int((parent != np.arange(parent.shape[0])[:, None]).any(axis=0).sum()),
    }


def _changes(values: list) -> list[list]:
    """`[iteration, value]` at the first iteration and wherever the value changes."""
    return [[t, v] for t, v in enumerate(values) if t == 0 or v != values[t - 1]]


def agent_path(parent: np.ndarray, member: int) -> np.ndarray:
    """`[T]`: which member trained the agent that `member` holds at the end, at each
    iteration (`pbt/parent` followed back)."""
    holder = np.empty(parent.shape[1], np.int64)
    for t in reversed(range(parent.shape[1])):
        member = holder[t] = parent[member, t]
    return holder


def plot_pbt(
    path: Path,
    metrics: Mapping[str, np.ndarray],
    best: int,
    steps_per_iteration: int,
    title: str,
    curve: str = "episode/return",
) -> Any:
    """`pbt.png`: one panel for `curve` and one per explored hyperparameter; each member a
    thin line, the best agent's history (its path through the members) a thick one. Returns
    the matplotlib `Figure` it saved to `path`."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend is left alone

    parent = np.asarray(metrics["pbt/parent"]).astype(np.int64)
    holder, columns = agent_path(parent, best), np.arange(parent.shape[1])
    names = sorted(k for k in metrics if k.startswith("hp/"))
    fig = Figure(figsize=(7, 2.6 * (1 + len(names))), dpi=100)
    axes = fig.subplots(1 + len(names), 1, sharex=True, squeeze=False)[:, 0]
    steps = (columns + 1) * steps_per_iteration
    for ax, key in zip(axes, [curve, *names], strict=True):
        values = np.asarray(metrics[key], np.float64)
        for row in values:
            ax.plot(steps, row, color="0.6", linewidth=0.6)
        ax.plot(steps, values[holder, columns], color="C0", linewidth=2, label="best agent")
        positive = values[np.isfinite(values)]
        if key != curve and positive.size and positive.min() > 0:
            if positive.max() / positive.min() > 10:
                ax.set_yscale("log")
        ax.set_ylabel(key.removeprefix("hp/"))
        ax.grid(alpha=0.3)
    axes[0].set_title(f"{title}: {parent.shape[0]} members (grey), the best agent (blue)")
    axes[0].legend(loc="best", fontsize=8)
    axes[-1].set_xlabel("environment steps (per member)")
    fig.tight_layout()
    fig.savefig(path)
    return fig
