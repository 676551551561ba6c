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
from rlax_trpo.errors import ConfigError
from rlax_trpo.experiment import loggers

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


def _no_login_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user who never ran `wandb login`: an empty home (no .netrc, no
    wandb settings), no API key, no mode."""
    import os

    drop = ("WANDB_", "NETRC", "XDG_CONFIG_HOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    root = str(Path(__file__).resolve().parents[1])
    return {**env, "HOME": str(home), "PYTHONPATH": root, "JAX_PLATFORMS": "cpu", **extra}


@needs_wandb
def test_wandb_without_a_login_is_one_line_exit_2_and_nothing_written(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    home, out = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    proc = subprocess.run(
        [sys.executable, str(root / "train.py"), *TINY, "--wandb", "--out", str(out)],
        cwd=tmp_path,  # no ./wandb/settings either
        env=_no_login_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: --wandb:") and proc.stderr.count("\n") == 1, proc.stderr
    assert "wandb login" in proc.stderr and "WANDB_MODE=offline" in proc.stderr
    assert not out.exists() and not (tmp_path / "wandb").exists()


CHECK_PROBE = """
from rlax_trpo.experiment import loggers
from rlax_trpo.errors import ConfigError
try:
    loggers.check_available(False, {"project": "p"})
    print("ok")
except ConfigError as err:
    print(err)
"""


@needs_wandb
@pytest.mark.parametrize(
    "given, ok",
    [
        ({}, False),
        ({"WANDB_MODE": "offline"}, True),
        ({"WANDB_MODE": "disabled"}, True),
        ({"WANDB_API_KEY": "0" * 40}, True),
        ({"netrc": "machine api.wandb.ai login user password " + "0" * 40}, True),
    ],
    ids=["no-login", "offline", "disabled", "api-key", "netrc"],
)
def test_wandb_credentials_are_looked_up_where_wandb_looks(tmp_path, given, ok):
    import subprocess
    import sys

    if "netrc" in given:
        (tmp_path / ".netrc").write_text(given.pop("netrc") + "\n")
        (tmp_path / ".netrc").chmod(0o600)
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_PROBE],
        cwd=tmp_path,
        env=_no_login_env(tmp_path, **given),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = proc.stdout.strip().splitlines()[-1]
    assert (said == "ok") == ok, said
