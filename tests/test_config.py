"""Config loading, validation and the CLI's answer to bad input (one line, exit 2, no files)."""

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import train
from rlax_trpo import Config, HParams, load_config
from rlax_trpo.config import config_from_dict, parse_overrides, read_yaml
from rlax_trpo.defaults import DEFAULT_CONFIG
from rlax_trpo.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_loads(path):
    raw = read_yaml(path)
    if raw.get("algorithm") == "grpo_lm":
        assert config_from_dict(raw).num_iterations >= 1
        return
    config = load_config(path)
    assert config.num_iterations >= 1
    assert isinstance(config.hp, HParams)


def test_config_is_frozen_hashable_and_hp_is_a_pytree():
    config = Config.create(num_envs=8)
    with pytest.raises(AttributeError):
        config.num_envs = 4
    assert hash(config) == hash(Config.create(num_envs=8))
    assert config.replace(num_envs=16).num_envs == 16 and config.num_envs == 8
    leaves = jax.tree.leaves(config.hp)
    assert len(leaves) > 10 and all(np.asarray(x).dtype == np.float32 for x in leaves)


def test_overrides_parse_yaml_values():
    got = parse_overrides(
        [
            "num_envs=64",
            "hp.learning_rate=1e-3",
            "hidden_sizes=[32,32]",
            "normalize_obs=true",
            "env=Acrobot-v1",
        ]
    )
    assert got == {
        "num_envs": 64,
        "hp.learning_rate": 1e-3,
        "hidden_sizes": [32, 32],
        "normalize_obs": True,
        "env": "Acrobot-v1",
    }
    config = load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        ["num_envs=64", "hp.learning_rate=1e-3", "env=Acrobot-v1"],
    )
    assert config.num_envs == 64 and config.env == "Acrobot-v1"
    assert float(config.hp.learning_rate) == pytest.approx(1e-3)


BAD_INPUTS = [
    (["--config", "configs/does_not_exist.yaml"], "does not exist"),
    (["--config", "{malformed}"], "not valid YAML"),
    (["bogus_key=1"], "bogus_key: unknown key; allowed keys:"),
    (["hp.bogus=1"], "hp.bogus: unknown key; allowed keys:"),
    (["num_envs=abc"], "num_envs: Input should be a valid integer"),
    (["hp.learning_rate=fast"], "hp.learning_rate: Input should be a valid number"),
    (["num_envs=0"], "num_envs: Input should be greater than 0"),
    (["num_steps=-5"], "num_steps: Input should be greater than 0"),
    (["hp.learning_rate=-1"], "hp.learning_rate: Input should be greater than 0"),
    (["num_minibatches=3"], "num_minibatches: 3 does not divide the batch"),
    (["learning_rate=1e-3"], "learning_rate: unknown key (did you mean hp.learning_rate?)"),
    (["hp.learnin_rate=1e-3"], "hp.learnin_rate: unknown key (did you mean hp.learning_rate?)"),
    (["algorithm=sac"], "algorithm: unknown 'sac'; allowed: ppo, trpo, npg, vpg, grpo"),
    (["env=CartPole-v9"], "env: unknown environment 'CartPole-v9'"),
    (["total_env_steps=10"], "total_env_steps: 10 is less than one iteration"),
    (["--seeds", "0"], "--seeds: must be a positive integer"),
    (["noequals"], "expected key=value"),
]


@pytest.mark.parametrize("argv, expected", BAD_INPUTS, ids=[b[1][:30] for b in BAD_INPUTS])
def test_bad_input_one_line_exit_2_nothing_written(argv, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    if argv[:2] == ["--config", "{malformed}"]:
        bad = tmp_path / "bad.yaml"
        bad.write_text("algorithm: ppo\nhp: [unclosed\n")
        argv = ["--config", str(bad)]
    out = tmp_path / "run"
    code = train.main([*argv, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    first, *listing = err.splitlines()  # only an unknown environment lists names below
    assert first.startswith("error: ") and (not listing or "unknown environment" in first), err
    assert expected in first, err
    assert not out.exists()


def test_cli_exit_status_is_2_in_a_real_process(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "num_envs=abc", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "num_envs" in proc.stderr
    assert not out.exists()


def test_out_must_be_empty(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("x")
    assert train.main(["--out", str(tmp_path), "--no-progress"]) == 2
    assert "--out" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_hparams_create_validates():
    with pytest.raises(ConfigError, match="hp.gamma"):
        HParams.create(gamma=2.0)


def test_embedded_default_equals_ppo_cartpole_yaml():
    import yaml

    assert yaml.safe_load((ROOT / "configs" / "ppo_cartpole.yaml").read_text()) == DEFAULT_CONFIG
