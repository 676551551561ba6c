"""`rlax-trpo report` pools the seeds of inputs of one (algorithm, task) that ran the same
settings and reports inputs that ran different settings as rows of their own
(`rlax_trpo.report.settings`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_aggregate import needs_rliable

from rlax_trpo import cli
from rlax_trpo.config.configuration import load_config

BASE = {"algorithm": "ppo", "env": "TaskA", "num_envs": 8, "layer_norm": False,
        "hp": {"learning_rate": 0.001, "gamma": 0.99}}  # fmt: skip


def _summary(scores: list[float]) -> dict:
    return {"algorithm": "ppo", "env": "TaskA", "num_seeds": len(scores), "num_settings": 1,
            "final_return_per_seed": scores, "total_env_steps": 4096}  # fmt: skip


def _run_folder(folder: Path, scores: list[float], config: dict | None) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(_summary(scores)))
    if config is not None:
        (folder / "config.yaml").write_text(yaml.safe_dump(config))


def _publish(path: Path, scores: list[float], command: str, config: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    published = {"date": "2026-01-01", "command": command, "task": "TaskA",
                 "summary": _summary(scores)}  # fmt: skip
    if config is not None:
        published["config"] = config
    path.write_text(json.dumps(published))


def _per_task(inputs: list[Path], out: Path, capsys) -> tuple[dict, str]:
    code = cli.main(["report", *map(str, inputs), "--out", str(out), "--reps", "50"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    return json.loads((out / "report.json").read_text())["per_task"]["TaskA"], stdout


def _with(**changes) -> dict:
    config = json.loads(json.dumps(BASE))
    for key, value in changes.items():
        if key.startswith("hp_"):
            config["hp"][key[3:]] = value
        else:
            config[key] = value
    return config


@needs_rliable
def test_runs_of_different_settings_are_rows_of_their_own(tmp_path, capsys):
    runs = tmp_path / "runs"
    _run_folder(runs / "a", [1.0, 2.0], _with())
    _run_folder(runs / "b", [3.0], _with())
    _run_folder(runs / "c", [10.0, 20.0], _with(layer_norm=True))
    _run_folder(runs / "d", [5.0], _with(hp_learning_rate=0.003))
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert sorted(cells) == [
        "ppo (hp.learning_rate=0.001, layer_norm=false)",
        "ppo (hp.learning_rate=0.001, layer_norm=true)",
        "ppo (hp.learning_rate=0.003, layer_norm=false)",
    ]
    same = cells["ppo (hp.learning_rate=0.001, layer_norm=false)"]
    assert same["seeds"] == 3 and same["mean"] == pytest.approx(2.0)  # a and b pooled
    assert cells["ppo (hp.learning_rate=0.001, layer_norm=true)"]["mean"] == pytest.approx(15.0)
    assert "3 different settings" in stdout and "hp.learning_rate, layer_norm" in stdout


@needs_rliable
def test_a_field_one_run_lacks_does_not_split_them(tmp_path, capsys):
    runs = tmp_path / "runs"
    older = _with()
    del older["layer_norm"]  # a config written before the field existed
    _run_folder(runs / "a", [1.0, 2.0], older)
    _run_folder(runs / "b", [3.0, 4.0], _with())
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert list(cells) == ["ppo"] and cells["ppo"]["seeds"] == 4
    assert "concatenated (2 + 2 = 4)" in stdout


@needs_rliable
def test_runs_that_differ_only_in_how_they_compute_pool(tmp_path, capsys):
    """`line_search_batch` evaluates TRPO's candidates all at once or batch by batch, the
    same step either way: runs differing only in it are one row."""
    runs = tmp_path / "runs"
    _run_folder(runs / "a", [1.0, 2.0], _with(line_search_batch=0))
    _run_folder(runs / "b", [3.0, 4.0], _with(line_search_batch=1))
    cells, _ = _per_task([runs], tmp_path / "report", capsys)
    assert list(cells) == ["ppo"] and cells["ppo"]["seeds"] == 4


@needs_rliable
def test_a_published_command_is_resolved_against_its_config_file(tmp_path, capsys):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "ppo_test.yaml").write_text(
        "algorithm: ppo\nenv: CartPole-v1\nnum_envs: 4\nnum_steps: 16\ntotal_env_steps: 4096\n"
    )
    results = tmp_path / "benchmarks" / "results"
    run = "python train.py --config configs/ppo_test.yaml --no-progress"
    _publish(results / "s0.json", [1.0], f"{run} --seeds 1 --seed 0 num_envs=8 --out DIR")
    _publish(results / "s1.json", [3.0],  # where and how it ran differ: the same setting
             f"{run} --seeds 1 --seed 1 --chunk-iterations 4 num_envs=8 --resume R")  # fmt: skip
    _publish(results / "wide.json", [9.0], f"{run} --seeds 1 --seed 0 num_envs=16 --out DIR")
    stored = load_config(tmp_path / "configs" / "ppo_test.yaml", ["num_envs=16"]).to_dict()
    _publish(results / "stored.json", [7.0], "anything", config=stored)
    cells, _ = _per_task([results], tmp_path / "report", capsys)
    assert sorted(cells) == ["ppo (num_envs=16)", "ppo (num_envs=8)"]
    assert cells["ppo (num_envs=8)"]["seeds"] == 2
    assert cells["ppo (num_envs=8)"]["mean"] == pytest.approx(2.0)
    assert "ppo (num_envs=16)" in cells  # wide.json resolved; stored.json read as stored
    assert cells["ppo (num_envs=16)"]["seeds"] == 2


@needs_rliable
def test_inputs_whose_settings_cannot_be_read_are_pooled_with_a_note(tmp_path, capsys):
    runs = tmp_path / "runs"
    _run_folder(runs / "a", [1.0], None)  # no config.yaml
    _run_folder(runs / "b", [3.0], _with())
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert list(cells) == ["ppo"] and cells["ppo"]["seeds"] == 2
    assert "its settings could not be read; pooled with ppo" in stdout


@needs_rliable
def test_where_the_others_split_an_unreadable_input_is_a_row_of_its_own(tmp_path, capsys):
    runs = tmp_path / "runs"
    _run_folder(runs / "a", [1.0], None)
    _run_folder(runs / "b", [3.0], _with())
    _run_folder(runs / "c", [5.0], _with(num_envs=16))
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert sorted(cells) == ["ppo (num_envs=16)", "ppo (num_envs=8)", "ppo (settings unknown)"]
    assert "reported as ppo (settings unknown)" in stdout


def _table_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table line in `text` (header and rows, not the rule)."""
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| ---")]  # fmt: skip
    return rows


@needs_rliable
@pytest.mark.parametrize("settings", [4, 5])
def test_many_settings_grow_the_table_down_the_page_not_across_it(settings, tmp_path, capsys):
    """Up to 4 algorithms (or settings): a row per task, three columns each. Beyond: a row per
    task and algorithm, each with its own figures and note, printed and in report.md alike."""
    runs = tmp_path / "runs"
    for i in range(settings):
        _run_folder(runs / f"r{i}", [float(i), float(i) + 2.0], _with(hp_learning_rate=i + 1))
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    rows = _table_rows(stdout)
    assert rows == _table_rows((tmp_path / "report" / "report.md").read_text().split("## ")[2])
    names = [f"ppo (hp.learning_rate={i + 1})" for i in range(settings)]
    assert sorted(cells) == sorted(names)
    if settings <= 4:
        assert len(rows) == 2 and len(rows[0]) == 1 + 3 * settings + 1  # task, 3 each, note
        return
    # 2 seeds each: the intervals are the range, and the header says so
    assert rows[0] == ["task", "algorithm", "IQM [range]", "mean [range]", "seeds", "note"]
    assert [r[:2] for r in rows[1:]] == [["TaskA", name] for name in sorted(names)]
    for row in rows[1:]:
        i = int(row[1].split("=")[1].rstrip(")")) - 1
        assert row[3].startswith(f"{i + 1:.4g} [") and row[4] == "2"  # mean of i and i + 2
        assert row[5] == cells[row[1]]["note"]  # its own note, not every algorithm's


@needs_rliable
def test_settings_that_differ_past_the_fourth_field_are_still_rows_of_their_own(tmp_path, capsys):
    # five fields differ; the first two groups agree on the first four (sorted) and differ
    # only in num_steps: their short labels are the same, so neither may be pooled
    runs = tmp_path / "runs"
    _run_folder(runs / "a", [1.0], _with(num_steps=16))
    _run_folder(runs / "b", [9.0], _with(num_steps=32))
    _run_folder(runs / "c", [2.0], _with(num_steps=16, hp_gamma=0.9))
    _run_folder(runs / "d", [3.0], _with(num_steps=16, hp_learning_rate=0.003))
    _run_folder(runs / "e", [4.0], _with(num_steps=16, layer_norm=True, num_envs=16))
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert len(cells) == 5 and all(cell["seeds"] == 1 for cell in cells.values())
    base = "hp.gamma=0.99, hp.learning_rate=0.001, layer_norm=false, num_envs=8"
    assert cells[f"ppo ({base}, num_steps=16)"]["mean"] == pytest.approx(1.0)
    assert cells[f"ppo ({base}, num_steps=32)"]["mean"] == pytest.approx(9.0)
    assert "ppo (hp.gamma=0.9, hp.learning_rate=0.001, layer_norm=false, num_envs=8, ...)" in cells
    assert "concatenated" not in stdout


@needs_rliable
def test_a_population_based_run_never_pools_with_a_plain_run(tmp_path, capsys):
    # the `pbt:` section is a setting: a PBT run and a plain run of one config are two rows
    runs = tmp_path / "runs"
    _run_folder(runs / "plain", [1.0, 2.0, 3.0, 4.0], _with(pbt=None))  # as config.yaml has it
    _run_folder(runs / "pbt", [5.0, 6.0, 7.0, 8.0], _with(pbt={"interval": 10}))
    summary = json.loads((runs / "pbt" / "summary.json").read_text())
    summary["pbt"] = {"best_member": 2, "schedule": {"learning_rate": [[0, 0.001]]}}
    (runs / "pbt" / "summary.json").write_text(json.dumps(summary))
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert sorted(cells) == ["ppo (pbt=null)", "ppo (pbt=set)"], sorted(cells)
    assert cells["ppo (pbt=null)"]["seeds"] == 4
    # the population is one result, its best member's, never 4 seeds
    assert cells["ppo (pbt=set)"]["seeds"] == 1 and cells["ppo (pbt=set)"]["scores"] == [7.0]
    assert "concatenated" not in stdout
    assert "a population-based training run of 4 members, reported as one population" in stdout
    assert "the population's range 5 to 8" in stdout and "not seeds" in stdout


@needs_rliable
def test_populations_of_one_setting_pool_as_seeds_of_their_best_members(tmp_path, capsys):
    runs = tmp_path / "runs"
    for i, best in enumerate((0, 3)):
        _run_folder(runs / f"pbt{i}", [1.0 + i, 2.0, 3.0, 4.0 + i], _with(pbt={"interval": 10}))
        summary = json.loads((runs / f"pbt{i}" / "summary.json").read_text())
        summary["pbt"] = {"best_member": best}
        (runs / f"pbt{i}" / "summary.json").write_text(json.dumps(summary))
    cells, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert list(cells) == ["ppo"] and cells["ppo"]["scores"] == [1.0, 5.0]
    assert "concatenated (1 + 1 = 2)" in stdout


@needs_rliable
def test_rows_of_different_budgets_carry_a_note(tmp_path, capsys):
    runs = tmp_path / "runs"
    _run_folder(runs / "a", [1.0, 2.0], _with())
    summary = _summary([3.0, 4.0])
    (runs / "b").mkdir()
    (runs / "b" / "summary.json").write_text(
        json.dumps({**summary, "algorithm": "trpo", "total_env_steps": 2048})
    )
    _, stdout = _per_task([runs], tmp_path / "report", capsys)
    assert (
        "TaskA: its rows ran different budgets (env steps per seed: ppo 4,096, trpo 2,048)"
        in stdout
    ), stdout
    _run_folder(tmp_path / "same" / "a", [1.0, 2.0], _with())
    (tmp_path / "same" / "b").mkdir()
    (tmp_path / "same" / "b" / "summary.json").write_text(
        json.dumps({**summary, "algorithm": "trpo"})
    )
    _, stdout = _per_task([tmp_path / "same"], tmp_path / "report2", capsys)
    assert "different budgets" not in stdout
