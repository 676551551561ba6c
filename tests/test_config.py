"""Config loading, validation and the CLI's answer to bad input (one line, exit 2, no files)."""

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import train
from rlax_trpo import Config, HParams, load_config
from rlax_trpo.algorithms.ppo import PPOHParams
from rlax_trpo.config import ControlHParams, config_from_dict, parse_overrides, read_yaml
from rlax_trpo.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_loads(path):
    config = load_config(path)
    assert config.num_iterations >= 1
    assert isinstance(config.hp, config.spec.hparams) and isinstance(config.hp, HParams)
    assert config.to_dict() == config_from_dict(read_yaml(path)).to_dict()


def test_config_is_frozen_hashable_and_hp_is_a_pytree():
    config = Config.create(num_envs=8)
    with pytest.raises(AttributeError):
        config.num_envs = 4
    assert hash(config) == hash(Config.create(num_envs=8))
    assert config.replace(num_envs=16).num_envs == 16 and config.num_envs == 8
    leaves = jax.tree.leaves(config.hp)
    assert len(leaves) == len(type(config.hp).names()) == 10
    assert all(np.asarray(x).dtype == np.float32 for x in leaves)


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
    (["bogus_key=1"], "bogus_key: unknown key; algorithm ppo reads: activation, adam_eps,"),
    (["hp.bogus=1"], "hp.bogus: unknown key; algorithm ppo reads: hp.clip_eps, hp.ent_coef,"),
    (["num_envs=abc"], "num_envs: Input should be a valid integer"),
    (["hp.learning_rate=fast"], "hp.learning_rate: Input should be a valid number"),
    (["num_envs=0"], "num_envs: Input should be greater than 0"),
    (["num_steps=-5"], "num_steps: Input should be greater than 0"),
    (["hp.learning_rate=-1"], "hp.learning_rate: Input should be greater than 0"),
    (["num_minibatches=3"], "num_minibatches: 3 does not divide the batch"),
    (["learning_rate=1e-3"], "learning_rate: unknown key for algorithm ppo (did you mean hp."),
    (["hp.learnin_rate=1e-3"], "hp.learnin_rate: unknown key for algorithm ppo (did you mean hp"),
    (["hp.num_envs=4"], "hp.num_envs: unknown key for algorithm ppo (num_envs is a static field"),
    (["algorithm=sac"], "algorithm: unknown 'sac'; allowed: ppo, trpo, npg, vpg, grpo, grpo_lm"),
    (["imports=[no_such_plugin_module]"], "imports: no module named 'no_such_plugin_module'"),
    (["--import", "no_such_plugin.py"], "imports: 'no_such_plugin.py' does not exist"),
    (["imports=3"], "imports: expected a list of module names"),
    (["--config", "{duplicate}"], "key 'hp' appears twice (line 3)"),
    (["--config", "{latin1}"], "is not UTF-8 text"),
    (["env=CartPole-v9"], "env: unknown environment 'CartPole-v9'"),
    (["total_env_steps=10"], "total_env_steps: 10 is less than one iteration"),
    (["num_envs=true"], "num_envs: expected a number, not a boolean"),
    (["hp.learning_rate=true"], "hp.learning_rate: expected a number, not a boolean"),
    (["hidden_sizes=[0]"], "hidden_sizes.0: Input should be greater than 0"),
    (["hidden_sizes=[-4]"], "hidden_sizes.0: Input should be greater than 0"),
    (["value_hidden_sizes=[64,0]"], "value_hidden_sizes.1: Input should be greater than 0"),
    (["total_env_steps=1e20"], "total_env_steps: "),
    (["--seeds", "0"], "--seeds: must be a positive integer"),
    (["noequals"], "expected key=value"),
    (["env_kwargs={max_steps_in_episode: -5}"], "env_kwargs.max_steps_in_episode: must be a posi"),
    (["env_kwargs={gravity: heavy}"], "env_kwargs.gravity: CartPole-v1 expects a number"),
    (["env_kwargs={max_steps_in_episode: 2.5}"], "env_kwargs.max_steps_in_episode: CartPole-v1 e"),
    (["env_kwargs={bogus: 1}"], "env_kwargs.bogus: not a parameter of CartPole-v1; allowed:"),
    (["env_kwargs=notadict"], "env_kwargs: Input should be a valid dictionary"),
    (["--seed", str(2**70)], "--seed: must be an integer from 0 to 2**63 - 1"),
    (["--seed", "-1"], "--seed: must be an integer from 0 to 2**63 - 1"),
    (["--num-processes", "2"], "--num-processes: a multi-process run needs --coordinator-address"),
    (["--coordinator-address", "notaport", "--num-processes", "2", "--process-id", "0"],
     "--coordinator-address: expected HOST:PORT"),
    (["--coordinator-address", "localhost:1234"], "give --num-processes and --process-id too"),
    (["--coordinator-address", "localhost:1234", "--num-processes", "2", "--process-id", "2"],
     "--process-id: must be from 0 to 1"),
    (["--peer-timeout", "30"], "--peer-timeout: only for a multi-process run"),
    (["--coordinator-address", "localhost:1234", "--num-processes", "2", "--process-id", "0",
      "--peer-timeout", "0"], "--peer-timeout: must be a positive integer"),
    (["--keep-checkpoints", "0"], "--keep-checkpoints: must be a positive integer"),
    (["--chunk-iterations", "0"], "--chunk-iterations: must be a positive integer"),
    (["--devices", "1000"], "--devices: 1000 is not between 1 and the"),
    (["--seeds", "abc"], "argument --seeds: invalid int value"),
    (["eval_episodes=0"], "eval_episodes: Input should be greater than 0"),
    (["hp.gamma=1.5"], "hp.gamma: Input should be less than or equal to 1"),
    (["hp.learning_rate=nan"], "hp.learning_rate: Input should be a finite number"),
    (["num_steps=1.5"], "num_steps: Input should be a valid integer"),
    (["activation=foo"], "activation: Input should be 'tanh' or 'relu'"),
    (["network=transformer"], "network: Input should be 'auto', 'mlp' or 'cnn'"),
    (["--sweep", "hp.learning_rate=abc,1"], "--sweep hp.learning_rate: value 'abc' is not a num"),
    (["--sweep", "hp.bogus=1,2"], "--sweep hp.bogus: not a hyperparameter of ppo"),
    (["--config", "{list}"], "must hold a mapping of keys, not a list"),
    (["--import", "{broken_plugin}"], "failed to import: SyntaxError"),
    (["--resume", "{not_a_run}"], "is not a run folder"),
]  # fmt: skip


@pytest.mark.parametrize("argv, expected", BAD_INPUTS, ids=[b[1][:30] for b in BAD_INPUTS])
def test_bad_input_one_line_exit_2_nothing_written(argv, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    bad = tmp_path / "bad.yaml"
    if argv[:2] == ["--config", "{malformed}"]:
        bad.write_text("algorithm: ppo\nhp: [unclosed\n")
    if argv[:2] == ["--config", "{duplicate}"]:
        bad.write_text("hp: {learning_rate: 0.01}\nnum_envs: 4\nhp: {gamma: 0.9}\n")
    if argv[:2] == ["--config", "{latin1}"]:
        bad.write_bytes("env: CartPole-v1 # caf\xe9\n".encode("latin-1"))
    if argv[:2] == ["--config", "{list}"]:
        bad.write_text("- algorithm\n- ppo\n")
    if argv[0] == "--config" and argv[1].startswith("{"):
        argv = ["--config", str(bad)]
    if argv == ["--import", "{broken_plugin}"]:
        (tmp_path / "broken_plugin.py").write_text("def broken(:\n")
        argv = ["--import", str(tmp_path / "broken_plugin.py")]
    out = tmp_path / "run"
    if argv == ["--resume", "{not_a_run}"]:
        out.mkdir()
        argv, out = ["--resume", str(out)], tmp_path / "nothing"
    code = train.main(
        [*argv, *([] if "--resume" in argv else ["--out", str(out)]), "--no-progress"]
    )
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


def test_hparams_create_validates_against_its_own_fields():
    with pytest.raises(ConfigError, match="hp.gamma"):
        ControlHParams.create(gamma=2.0)
    with pytest.raises(ConfigError, match="hp.max_kl: unknown key"):
        PPOHParams.create(max_kl=0.1)
    hp = PPOHParams.create(clip_eps=0.1)
    assert float(hp.clip_eps) == pytest.approx(0.1) and float(hp.gamma) == pytest.approx(0.98)


# For every algorithm, a field (static or hp) that only other algorithms read.
NOT_READ = [
    ("ppo", [], "cg_iters=50", "cg_iters: not read by algorithm ppo; read by trpo, npg"),
    ("ppo", [], "hp.max_kl=0.1", "hp.max_kl: not read by algorithm ppo; read by trpo, npg"),
    ("trpo", [], "penalty=kl_adaptive", "penalty: not read by algorithm trpo; read by ppo"),
    ("trpo", [], "hp.clip_eps=0.1", "hp.clip_eps: not read by algorithm trpo; read by ppo"),
    ("npg", [], "line_search_steps=5",
     "line_search_steps: not read by algorithm npg; read by trpo"),
    ("vpg", [], "num_epochs=2",
     "num_epochs: not read by algorithm vpg; read by ppo, grpo, grpo_lm"),
    ("grpo", [], "value_epochs=3",
     "value_epochs: not read by algorithm grpo; read by trpo, npg, vpg"),
    ("grpo", [], "hp.gae_lambda=0.9", "hp.gae_lambda: not read by algorithm grpo; read by ppo,"),
    ("grpo_lm", ["--config", "grpo_lm_max_digit"], "num_envs=4",
     "num_envs: not read by algorithm grpo_lm; read by ppo, trpo, npg, vpg, grpo"),
]  # fmt: skip


@pytest.mark.parametrize("algorithm, argv, override, expected", NOT_READ,
                         ids=[f"{a}-{o.split('=')[0]}" for a, _, o, _ in NOT_READ])  # fmt: skip
def test_a_field_the_algorithm_does_not_read_is_an_error_naming_its_readers(
    algorithm, argv, override, expected, tmp_path, capsys
):
    out = tmp_path / "run"
    algo = [] if argv else [f"algorithm={algorithm}"]
    code = train.main([*argv, *algo, override, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and expected in err, err
    assert not out.exists()


def test_one_source_of_defaults(tmp_path, capsys):
    """`Config.create()`, `load_config()` and `rlax-trpo train` with no config are one run,
    and the bundled ppo_cartpole is that run written out."""
    from rlax_trpo import run

    assert load_config().to_dict() == Config.create().to_dict()
    assert load_config("ppo_cartpole").to_dict() == Config.create().to_dict()
    small = ["total_env_steps=512", "eval_episodes=1"]
    assert train.main([*small, "--out", str(tmp_path / "cli"), "--no-progress"]) == 0
    run(Config.create(total_env_steps=512, eval_episodes=1), out=tmp_path / "api", progress=False)
    cli, api = ((tmp_path / d / "config.yaml").read_bytes() for d in ("cli", "api"))
    assert cli == api
