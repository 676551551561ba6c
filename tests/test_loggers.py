"""TensorBoard and W&B while a run goes: what is logged, how often, and read back.

W&B runs offline (`WANDB_MODE=offline`, no network); its `.wandb` files are read back with
the record framing below and wandb's own protobuf messages.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import train
from rlax_trpo import loggers
from rlax_trpo.errors import ConfigError

# 8 iterations of 2 seeds
TINY = ["num_envs=4", "num_steps=16", "total_env_steps=512", "num_epochs=1",
        "num_minibatches=1", "--no-progress", "--seeds", "2"]  # fmt: skip
needs_wandb = pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="no wandb")


def wandb_records(path: Path) -> list:
    """The records of a `.wandb` file: a 7-byte header, then LevelDB-log framing (32 KiB
    blocks; each piece: CRC32 4 bytes, length 2, type 1 = full, 2-4 = first/middle/last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, out, pending = 7, [], b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            out.append(wandb_internal_pb2.Record.FromString(pending))
            pending = b""
    return out


def read_wandb_run(path: Path) -> tuple[object, dict, dict[int, dict]]:
    """(run record, config, {step: history row}) of one offline run."""
    run, config, history = None, {}, {}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            config.update({i.key: json.loads(i.value_json) for i in run.config.update})
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            row = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            history[record.history.step.num] = row
    return run, config, history


@needs_wandb
def test_wandb_offline_run_holds_the_config_and_the_csv_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "sweep"
    argv = [*TINY, "--sweep", "hp.learning_rate=1e-3,3e-3", "--out", str(out), "--wandb",
            "--wandb-project", "tests", "--log-every", "3"]  # fmt: skip
    assert train.main(argv) == 0
    files = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2  # one W&B run per setting
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    seen = set()
    for path in files:
        run, config, history = read_wandb_run(path)
        lr = config["hp"]["learning_rate"]
        seen.add(lr)
        assert run.project == "tests" and run.run_group == "sweep"
        assert run.display_name == f"sweep[learning_rate={lr:g}]"
        assert config["algorithm"] == "ppo" and config["num_envs"] == 4 and config["seeds"] == 2
        assert config["setting"] == {"hp.learning_rate": lr}
        assert sorted(history) == list(range(8))  # every iteration, at step = iteration
        mine = [r for r in rows if float(r["hp.learning_rate"]) == pytest.approx(lr)]
        for it, logged in history.items():
            at = [r for r in mine if int(r["iteration"]) == it]
            assert logged["env_steps"] == int(at[0]["env_steps"])
            for name in ("policy/entropy", "value/loss", "ppo/clip_frac", "grad_norm"):
                expected = np.mean([float(r[name]) for r in at])
                assert logged[name] == pytest.approx(expected, rel=1e-5, abs=1e-7), (it, name)
    assert sorted(seen) == pytest.approx([1e-3, 3e-3])


def test_loggers_write_while_the_run_goes(tmp_path, monkeypatch):
    """Every `--log-every` iterations, not once at the end."""
    calls = []

    class Spy:
        def __init__(self, *args):
            pass

        def write(self, metrics, first_iteration, steps_per_iteration):
            calls.append((first_iteration, next(iter(metrics.values())).shape[-1]))

        def close(self):
            calls.append("closed")

    monkeypatch.setattr(loggers, "TensorBoardWriter", Spy)
    monkeypatch.setattr(loggers, "check_available", lambda *a: None)
    argv = [*TINY, "--tensorboard", "--log-every", "3", "--out", str(tmp_path / "r")]
    assert train.main(argv) == 0
    assert calls == [(0, 3), (3, 3), (6, 2), "closed"]


@pytest.mark.parametrize(
    "total, every", [(78, 6), (100, 10), (97, 10), (8, 1), (1, 1), (200, 20), (390, 39)]
)
def test_default_log_every_is_about_a_tenth(total, every):
    assert loggers.default_log_every(total) == every


def test_a_missing_logger_is_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "wandb", None)
    with pytest.raises(ConfigError, match=r"--wandb: needs wandb \(pip install"):
        loggers.check_available(False, {"project": "p"})
    assert train.main([*TINY, "--wandb", "--out", str(tmp_path / "r")]) == 2
    assert "error: --wandb: needs wandb" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
