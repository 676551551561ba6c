"""tools/seed_check.py: a published table cell's seeds chose nothing (no committed run of
another setting of its task and algorithm used them), on made-up results and on the
project's own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import seed_check  # noqa: E402


def _result(path: Path, command: str, seeds: int, iterations: int = 610) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {"algorithm": "trpo", "env": "Breakout-MinAtar", "num_seeds": seeds,
               "num_iterations": iterations, "total_env_steps": 9994240}  # fmt: skip
    data = {"command": command, "task": "Breakout-MinAtar", "date": "2026-01-01",
            "summary": summary}  # fmt: skip
    path.write_text(json.dumps(data))


TABLE = "python train.py --config configs/trpo_minatar.yaml --seeds 4 --seed {seed} "
TABLE += "--no-progress env=Breakout-MinAtar hp.max_kl=0.1 --out /tmp/x{seed}"
SWEEP = "python train.py --config configs/trpo_minatar.yaml --seeds 2 --seed 0 --no-progress "
SWEEP += "env=Breakout-MinAtar --sweep hp.max_kl=0.01,0.1 total_env_steps=2000000"


def _found(results: Path) -> list[str]:
    return [Path(v["cell"]).name for v in seed_check.violations(seed_check.runs(results))]


def test_a_cell_on_seeds_a_sweep_used_is_found(tmp_path):
    _result(tmp_path / "minatar" / "trpo_Breakout-MinAtar.json", TABLE.format(seed=0), 4)
    _result(tmp_path / "sweeps" / "trpo_Breakout-MinAtar.json", SWEEP, 2, 122)
    assert _found(tmp_path) == ["trpo_Breakout-MinAtar.json"]


def test_a_cell_on_set_aside_seeds_passes_and_a_copy_of_it_is_no_other_setting(tmp_path):
    _result(tmp_path / "minatar" / "trpo_Breakout-MinAtar.json", TABLE.format(seed=1000), 4)
    _result(tmp_path / "sweeps" / "trpo_Breakout-MinAtar.json", SWEEP, 2, 122)
    # the same run kept in a study's folder (another --out): the same setting and seeds
    _result(tmp_path / "study" / "trpo_Breakout-MinAtar.json", TABLE.format(seed=1000), 4)
    assert _found(tmp_path) == []


def test_one_command_over_a_changed_config_file_is_another_setting(tmp_path):
    # the command reads the same, but the config file it named had 128 envs then: the
    # iterations tell the two apart
    _result(tmp_path / "minatar" / "trpo_Breakout-MinAtar.json", TABLE.format(seed=1000), 4)
    _result(tmp_path / "old" / "trpo_Breakout-MinAtar.json", TABLE.format(seed=1000), 4, 1220)
    assert _found(tmp_path) == ["trpo_Breakout-MinAtar.json"]


def test_an_override_given_twice_is_its_last_value(tmp_path):
    table = TABLE.format(seed=1000)
    _result(tmp_path / "minatar" / "trpo_Breakout-MinAtar.json", table, 4)
    twice = table.replace("hp.max_kl=0.1", "hp.max_kl=0.03 hp.max_kl=0.1")
    _result(tmp_path / "study" / "trpo_Breakout-MinAtar.json", twice, 4)
    assert _found(tmp_path) == []
    _result(tmp_path / "other" / "x.json", table.replace("hp.max_kl=0.1", "hp.max_kl=0.3"), 4)
    assert _found(tmp_path) == ["trpo_Breakout-MinAtar.json"]


def test_rows_of_a_table_shown_side_by_side_may_share_seeds_but_not_with_a_sweep(tmp_path):
    memory = "python train.py --config ppo_memory_chain --seeds 4 --seed 1000"
    summary = {"env": "MemoryChain-bsuite", "algorithm": "ppo", "num_seeds": 4}
    for name, command in (("gru", memory), ("feedforward", f"{memory} memory=none")):
        path = tmp_path / "bundled_2core" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"command": command, "summary": summary}))
    assert _found(tmp_path) == []
    # the same pair in a table that prints one cell per task and algorithm is caught
    for name in ("gru", "feedforward"):
        (tmp_path / "minatar").mkdir(exist_ok=True)
        os.replace(
            tmp_path / "bundled_2core" / f"{name}.json", tmp_path / "minatar" / f"{name}.json"
        )
    assert sorted(_found(tmp_path)) == ["feedforward.json", "gru.json"]
    # and a tuning run on the published seeds is caught beside a row of the table
    (tmp_path / "minatar" / "gru.json").rename(tmp_path / "bundled_2core" / "gru.json")
    (tmp_path / "minatar" / "feedforward.json").rename(tmp_path / "sweep.json")
    assert _found(tmp_path) == ["gru.json"]


def test_no_published_cell_of_the_project_shares_a_seed_with_another_setting(capsys):
    # the committed results: every cell not on PENDING (each marked where it is published)
    code = seed_check.main([])
    assert code == 0, capsys.readouterr().out
