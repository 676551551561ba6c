"""An environment without an action mask runs as it did before masks existed: the bundled
CartPole, MinAtar and Jumanji configs (every algorithm, memory, the vine) at two iterations,
their `metrics.csv` equal to the one recorded by the code before masks were added, under the
suite's own XLA flags (tests/data/unmasked_runs; Jumanji's Snake, which has a mask, with
`mask_actions=false`). A change that is meant to alter these runs re-records them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ACCELERATOR

import train

RECORDED = Path(__file__).parent / "data" / "unmasked_runs"
RUNS = {
    "ppo_cartpole": ["ppo_cartpole", "total_env_steps=512"],
    "trpo_cartpole": ["trpo_cartpole", "total_env_steps=2048"],
    "vpg_cartpole": ["vpg_cartpole", "total_env_steps=2048"],
    "npg_cartpole": ["npg_cartpole", "total_env_steps=2048"],
    "trpo_vine_cartpole": [
        "trpo_cartpole",
        "sampling=vine",
        "vine_states=8",
        "vine_horizon=8",
        "total_env_steps=2176",
    ],
    "trpo_memory_cartpole": ["trpo_memory_cartpole", "total_env_steps=8192"],
    "grpo_cartpole": ["grpo_cartpole", "total_env_steps=32000"],
    "ppo_minatar": ["ppo_minatar", "total_env_steps=16384"],
    "trpo_minatar": ["trpo_minatar", "total_env_steps=32768"],
    "ppo_jumanji_snake": ["ppo_jumanji_snake", "total_env_steps=16384", "mask_actions=false"],
}


@pytest.mark.skipif(ACCELERATOR, reason="recorded on the CPU (a GPU rounds differently)")
@pytest.mark.parametrize("name", sorted(RUNS))
def test_an_unmasked_run_is_the_one_recorded_before_masks(tmp_path, name):
    if name.startswith("ppo_jumanji"):
        pytest.importorskip("jumanji")
    out = tmp_path / name
    assert train.main(["--config", *RUNS[name], "--no-progress", "--out", str(out)]) == 0
    assert (out / "metrics.csv").read_text() == (RECORDED / f"{name}.csv").read_text()
