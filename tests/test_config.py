"""Config loading, validation and the CLI's answer to bad input (one line, exit 2, no files)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import conftest
import jax
import numpy as np
import pytest

import rlax_trpo
import train
from rlax_trpo import Config, HParams, load_config
from rlax_trpo.algorithms.ppo import PPOHParams
from rlax_trpo.config import (
    ControlHParams,
    config_from_dict,
    merge_overrides,
    parse_overrides,
    read_yaml,
)
from rlax_trpo.config.sweep import MAX_SETTINGS, Sweep, parse_sweeps
from rlax_trpo.errors import ConfigError, RunFailed
from rlax_trpo.experiment import driver, memory_check, plan

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def _skip_without_its_suite(path: Path) -> None:
    """Skip a config whose environment suite (an optional extra) is not installed here."""
    from rlax_trpo.envs.registry import EXTRAS, env_names_by_suite

    prefix = str(read_yaml(path).get("env", "")).partition("/")[0]
    if prefix in EXTRAS and prefix not in env_names_by_suite():
        pytest.skip(f"the {prefix} suite is not installed")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_loads(path):
    _skip_without_its_suite(path)
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


# Bad input, one row each: (command line, the start of its one error line). A row may also be
# a Python-API row, (a dict of `Config.create` keyword arguments, the start of the line), run
# at the command line as `key=<JSON value>` overrides. Every row the Python API can express (a
# dict, or `key=value` overrides only) must be refused by `Config.create` with the same line
# (test_config_create_refuses_what_the_command_line_refuses). Rows of checks that today's code
# lacked carry `total_env_steps=256` where the run would otherwise train for minutes before
# the test could fail.
SMALL = "total_env_steps=256"
LR_GRID = ",".join(f"{(i + 1) * 1e-5:g}" for i in range(101))  # 101 x 100 > MAX_SETTINGS
ENT_GRID = ",".join(f"{i * 1e-3:g}" for i in range(100))
BAD_INPUTS = [
    (["--config", "configs/does_not_exist.yaml"], "config file 'configs/does_not_exist.yaml': no"),
    (["--config", "my_ppo.yaml"], "config file 'my_ppo.yaml': no such file (`rlax-trpo configs` l"),
    (["--config", "ppo_cartpol"], "config 'ppo_cartpol': no bundled config of that name (did you"),
    (["--config", "{folder}"], "is a directory; give a YAML file or a config name"),
    (["--config", "ppo_cartpole", "--config", "trpo_cartpole"], "--config: given twice"),
    (["--out", "a", "--out", "b"], "--out: given twice ('a' and 'b'); give it once"),
    (["trian"], "'trian': no such command (did you mean train?"),
    (["lerning_rate=1e-3"], "lerning_rate: unknown key for algorithm ppo (did you mean hp.learni"),
    (["env=CartPole-v2"], "(did you mean 'CartPole-v1'? `rlax-trpo configs --envs` lists them"),
    (["env_kwargs={gravity: 1.0e39}", SMALL], "env_kwargs.gravity: 1e+39 does not fit float32"),
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
    (["--seed", str(2**70)], "--seed: must be an integer from 0 to 4294967294"),
    (["--seed", "-1"], "--seed: must be an integer from 0 to 4294967294"),
    (["--seed", str(2**32), SMALL], "--seed: must be an integer from 0 to 4294967294"),
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
    (["network=transformer"], "network: unknown network 'transformer' (known: auto, mlp, cnn, "),
    (["--sweep", "hp.learning_rate=abc,1"], "--sweep hp.learning_rate: value 'abc' is not a num"),
    (["--sweep", "hp.bogus=1,2"], "--sweep hp.bogus: not a hyperparameter of ppo"),
    (["--config", "{list}"], "must hold a mapping of keys, not a list"),
    (["--import", "{broken_plugin}"], "failed to import: SyntaxError"),
    (["--resume", "{not_a_run}"], "is not a run folder"),
    ({"env": "CartPole-v2"}, "env: unknown environment 'CartPole-v2'"),  # Config.create(env=)
    # sizes JAX holds in int32, values that do not fit JAX's types
    (["num_envs=100000000", "total_env_steps=3200000000"],
     "num_envs x num_steps: 100000000 x 32 = 3200000000 does not fit int32"),
    (["env_kwargs={max_steps_in_episode: 1000000000000}"],
     "env_kwargs.max_steps_in_episode: 1000000000000 does not fit int32"),
    (["env_kwargs={gravity: 1.0e+39}", SMALL], "env_kwargs.gravity: 1e+39 does not fit float32"),
    (["num_envs=1", "num_steps=1", "total_env_steps=1000000000000"],
     "total_env_steps: 1000000000000 is 1000000000000 iterations of num_envs x num_steps = 1"),
    (["ref_refresh_every=3000000000", "algorithm=grpo", "num_envs=8", "num_minibatches=1", SMALL],
     "ref_refresh_every: 3000000000 does not fit int32"),
    (["hp.learning_rate=1.0e+39", SMALL], "hp.learning_rate: 1e+39 does not fit float32"),
    ({"algorithm": "grpo_lm", "num_iterations": 10**12},
     "num_iterations: 1000000000000 does not fit int32"),
    (["--seeds", "3000000000"], "--seeds: 1 setting(s) x 3000000000 seed(s) = 3000000000 members"),
    # the population against the machine's memory (an absurd population)
    (["--seeds", "100000000"], "--seeds: 1 setting(s) x 100000000 seed(s) = 100000000 member(s) "
     "need at least"),
    # epochs whose keys and losses alone exceed any machine's memory (3.2 TB, 8 TB)
    (["num_epochs=2000000000", "--seeds", "100", SMALL], "num_epochs: 2000000000 epochs x 1 m"),
    (["algorithm=trpo", "value_epochs=2000000000", "--seeds", "100", SMALL],
     "value_epochs: 2000000000 epochs x 4 minibatches hold at least"),
    # a field that does nothing without another
    (["n_step=3", SMALL], "n_step: read only with advantage: nstep"),
    (["advantage=mc", "hp.gae_lambda=0.9", SMALL], "hp.gae_lambda: read only with advantage: gae"),
    (["optimizer=sgd", "adam_eps=1.0e-8", SMALL], "adam_eps: read only with optimizer: adam"),
    (["hp.value_clip_eps=0.3", SMALL], "hp.value_clip_eps: read only with clip_value_loss: true"),
    (["penalty=kl_fixed", "hp.kl_target=0.02", SMALL],
     "hp.kl_target: read only with penalty: kl_adaptive"),
    (["hp.kl_beta=2.0", SMALL], "hp.kl_beta: read only with penalty: kl_fixed | kl_adaptive"),
    (["memory_size=64", SMALL],
     "memory_size: read only with memory: gru | lstm (or value_memory: gru | lstm)"),
    # ... given beside the override that makes it unread (the file's own value is dropped)
    (["--config", "ppo_memory_chain", "memory=none", "memory_size=64", SMALL],
     "memory_size: read only with memory: gru | lstm (or value_memory: gru | lstm)"),
    (["algorithm=trpo", "vine_horizon=8", SMALL], "vine_horizon: read only with sampling: vine"),
    (["algorithm=trpo", "cg_solver=scan", "hp.cg_tol=0.001", SMALL],
     "hp.cg_tol: read only with cg_solver: jax"),
    (["std_ddof=1", "algorithm=grpo", "num_envs=8", "num_minibatches=1", "group_advantage=rloo",
      SMALL], "std_ddof: read only with group_advantage: grpo"),
    ({"algorithm": "grpo_lm", "num_iterations": 1, "hp": {"sapo_temperature_pos": 2.0}},
     "hp.sapo_temperature_pos: read only with loss_type: sapo"),
    ({"algorithm": "grpo_lm", "num_iterations": 1, "warm_start_batch_size": 8},
     "warm_start_batch_size: read only with warm_start_steps > 0"),
    # sweeps, and the run folder
    (["--sweep", "hp.learning_rate=1e-3,1e-4", "hp.learning_rate=5e-4", SMALL],
     "--sweep hp.learning_rate: also set by the override hp.learning_rate=0.0005"),
    (["--sweep", "hp.learning_rate=1e-3,1e-4", "hp={learning_rate: 0.0005}", SMALL],
     "--sweep hp.learning_rate: also set by the override hp.learning_rate=0.0005"),
    (["--sweep", f"hp.learning_rate={LR_GRID}", "--sweep", f"hp.ent_coef={ENT_GRID}"],
     "--sweep: 101 (hp.learning_rate) x 100 (hp.ent_coef) = 10100 settings; at most 10,000"),
    (["--out", "", SMALL], "argument --out: an empty path (it would be the current directory)"),
    (["--resume", ""], "argument --resume: an empty path (it would be the current directory)"),
    # population-based training (pbt:): priors on traced hyperparameters only, real bounds
    (["pbt.explore.num_envs=uniform:4,8"], "pbt.explore.num_envs: not a hyperparameter of this"),
    (["pbt.explore.lr=uniform:1e-4,1e-2"], "pbt.explore.lr: not a hyperparameter of this algo"),
    (["pbt.explore.learning_rate=uniform:1e-2,1e-4"],
     "pbt.explore.learning_rate: 'uniform:1e-2,1e-4': bounds 0.01, 0.0001 are not a prior"),
    (["pbt.explore.learning_rate=loguniform:0,1e-2"],
     "pbt.explore.learning_rate: 'loguniform:0,1e-2': bounds 0, 0.01 are not a prior (0 < LOW"),
    (["pbt.explore.learning_rate=normal:1e-3,1e-4"],
     "pbt.explore.learning_rate: 'normal:1e-3,1e-4' is not a prior"),
    (["pbt.explore.learning_rate=uniform:a,b"],
     "pbt.explore.learning_rate: 'uniform:a,b': the bounds are not numbers"),
    (["pbt.explore.ent_coef=uniform:-1,1"],
     "pbt.explore.ent_coef: the prior's bound -1 is outside hp.ent_coef's range"),
    (["pbt={explore: {}}"], "pbt.explore: Dictionary should have at least 1 item"),
    (["pbt.explore.ent_coef=uniform:0,0.1", "pbt.fraction=0.6"],
     "pbt.fraction: Input should be less than or equal to 0.5"),
    (["pbt.explore.ent_coef=uniform:0,0.1", "pbt.ready=0"],
     "pbt.ready: Input should be greater than 0"),
    (["pbt.explore.ent_coef=uniform:0,0.1", "pbt.factors=[0.8,-1]"],
     "pbt.factors: [0.8, -1.0] must all be positive"),
    (["pbt.explore.ent_coef=uniform:0,0.1", "pbt.init=grid"],
     "pbt.init: Input should be 'config' or 'prior'"),
    (["pbt.explore.ent_coef=uniform:0,0.1", "pbt.bogus=1"], "pbt.bogus: unknown key"),
    (["--config", "ppo_pbt_cartpole", "--sweep", "hp.learning_rate=1e-3,1e-4", SMALL],
     "--sweep hp.learning_rate: with pbt.init: prior each member starts from a draw of pbt.expl"),
    (["--seeds", "1", "pbt.explore.ent_coef=uniform:0,0.1"],
     "pbt: a population of 1 member has no other to copy"),
]  # fmt: skip


def _row(row) -> tuple[list[str], str, dict | None]:
    """A table row as (command line, expected start of the line, Config.create's keyword
    arguments or None when the Python API cannot express it)."""
    argv, expected = row
    if isinstance(argv, dict):  # a Python-API row
        return [f"{k}={json.dumps(v)}" for k, v in argv.items()], expected, argv
    overrides_only = all("=" in a and not a.startswith("-") for a in argv)
    fields = merge_overrides({}, parse_overrides(argv)) if overrides_only else None
    return argv, expected, fields


ROWS = [_row(row) for row in BAD_INPUTS]
IDS = [expected[:30] for _, expected, _ in ROWS]
API_ROWS = [(argv, fields) for argv, _, fields in ROWS if fields is not None]


def _cli_error(argv: list[str], tmp_path: Path, capsys, monkeypatch) -> tuple[int, str]:
    """Run the command line on a table row: its exit status and stderr; checks that nothing
    was written (no run folder, nothing in the working directory either)."""
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
    if argv[:2] == ["--config", "{folder}"]:
        argv = ["--config", str(tmp_path)]
    elif argv[0] == "--config" and argv[1].startswith("{"):
        argv = ["--config", str(bad)]
    if argv == ["--import", "{broken_plugin}"]:
        (tmp_path / "broken_plugin.py").write_text("def broken(:\n")
        argv = ["--import", str(tmp_path / "broken_plugin.py")]
    out = tmp_path / "run"
    if argv == ["--resume", "{not_a_run}"]:
        out.mkdir()
        argv, out = ["--resume", str(out)], tmp_path / "nothing"
    own_folder = "--resume" in argv or "--out" in argv
    if "--out" in argv:  # the row's own --out: run where it must write nothing
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        monkeypatch.chdir(cwd)
    code = train.main([*argv, *([] if own_folder else ["--out", str(out)]), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert not out.exists()
    assert "--out" not in argv or not any(cwd.iterdir())
    return code, err


def test_a_files_key_an_override_makes_unread_is_dropped_and_its_own_are_refused(tmp_path):
    """`ppo_memory_chain` sets `memory_size: 64`; `memory=none` makes it unread, so the file's
    value is dropped (the default stands), not refused: the user never wrote it. A file
    that sets a key it leaves unread itself is still refused, overrides or not."""
    config = load_config("ppo_memory_chain", ["memory=none"])
    assert config.memory == "none" and config.memory_size == Config.create().memory_size
    assert load_config("ppo_memory_chain", []).memory_size == 64
    own = tmp_path / "own.yaml"
    own.write_text("algorithm: ppo\nmemory: none\nmemory_size: 64\nhp:\n  gamma: 0.9\n")
    for overrides in ([], ["num_envs=8"]):
        with pytest.raises(ConfigError, match="^memory_size: read only with memory: gru"):
            load_config(own, overrides)
    mc = load_config("ppo_cartpole", ["advantage=mc"])  # no key of its file made unread
    assert mc.advantage == "mc"


@pytest.mark.parametrize("argv, expected, fields", ROWS, ids=IDS)
def test_bad_input_one_line_exit_2_nothing_written(
    argv, expected, fields, tmp_path, capsys, monkeypatch
):
    code, err = _cli_error(argv, tmp_path, capsys, monkeypatch)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert expected in err, err


@pytest.mark.parametrize("argv, fields", API_ROWS, ids=[" ".join(a)[:40] for a, _ in API_ROWS])
def test_config_create_refuses_what_the_command_line_refuses(
    argv, fields, tmp_path, capsys, monkeypatch
):
    """`Config.create` (the Python API's way to a config) refuses every row it can express
    with the command line's line, word for word."""
    with pytest.raises(ConfigError) as refused:
        Config.create(**fields)
    code, err = _cli_error(argv, tmp_path, capsys, monkeypatch)
    assert code == 2, err
    assert f"error: {refused.value}".splitlines()[0] == err.splitlines()[0]


def test_fields_read_in_any_case_and_defaults_are_accepted():
    """A field some section reads whatever its condition (VPG's critic is fitted by Adam,
    so `adam_eps` counts with `optimizer: sgd`), and every conditional field at its default
    without its condition (as every saved config.yaml holds them), are accepted."""
    assert Config.create(algorithm="vpg", optimizer="sgd", adam_eps=1e-6).adam_eps == 1e-6
    with pytest.raises(ConfigError, match="adam_eps: read only with optimizer: adam"):
        Config.create(algorithm="ppo", optimizer="sgd", adam_eps=1e-6)
    for name in ("ppo", "trpo", "npg", "vpg", "grpo"):
        saved = Config.create(algorithm=name, num_envs=8).to_dict()
        assert config_from_dict(saved).to_dict() == saved


def test_env_kwargs_fit_the_parameter_they_replace():
    """An environment parameter of a narrower type than JAX's int32 / float32 bounds its
    `env_kwargs` value too (the configuration's own check covers int32 and float32)."""
    from rlax_trpo.envs.gymnax_suite import check_param

    with pytest.raises(ConfigError, match=r"env_kwargs.k: 300 does not fit X's uint8 \(0 to 255\)"):
        check_param("X", "k", 300, np.uint8(3))
    check_param("X", "k", 255, np.uint8(3))


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


# --- the checks that need more than a config: the run's plan, its memory, its signals --------


def _plan(config, **given) -> driver.RunPlan:
    fields = dict.fromkeys(driver.RunPlan._fields)
    fields.update(config=config, shard="population", progress=False, tensorboard=False)
    return plan.plan_run(driver.RunPlan(**{**fields, **given}))


def test_a_grid_beyond_the_limit_is_refused_before_its_values_are_checked(monkeypatch):
    """`--sweep` (parse_sweeps) and the Python API (`run(sweep=...)`, through plan_run)
    refuse a grid of more than MAX_SETTINGS settings with the same line, without building
    the grid or validating one value."""
    config = Config.create()
    items = [f"hp.learning_rate={LR_GRID}", f"hp.ent_coef={ENT_GRID}"]
    monkeypatch.setattr(Config, "replace", lambda *a, **k: pytest.fail("a value was checked"))
    with pytest.raises(ConfigError, match=f"= 10100 settings; at most {MAX_SETTINGS:,}") as cli:
        parse_sweeps(items, config)
    monkeypatch.undo()
    grid = Sweep(("hp.learning_rate", "hp.ent_coef"), (tuple(range(1, 102)), tuple(range(100))))
    with pytest.raises(ConfigError) as api:
        _plan(config, sweep=grid)
    assert str(api.value) == str(cli.value)
    assert len(parse_sweeps(["hp.learning_rate=1e-3,1e-4"], config).settings) == 2


def test_a_swept_key_given_as_an_override_too_is_refused():
    """`--sweep hp.x=...` with an override of hp.x (dotted or inside `hp={...}`): config.yaml
    would record a value no member used. Other overrides go with a sweep."""
    config = Config.create()
    for override in ("hp.learning_rate=5e-4", "hp={learning_rate: 0.0005, gamma: 0.9}"):
        with pytest.raises(ConfigError, match="--sweep hp.learning_rate: also set by the over"):
            parse_sweeps(["hp.learning_rate=1e-3,1e-4"], config, [override])
    sweep = parse_sweeps(["hp.learning_rate=1e-3,1e-4"], config, ["hp.gamma=0.9", "num_envs=4"])
    assert sweep.names == ("hp.learning_rate",)


def test_the_python_api_refuses_the_run_arguments_the_command_line_does(tmp_path, monkeypatch):
    """`rlax_trpo.run(out="")` (it would write into the working directory), `resume=""`, a
    seed beyond JAX's 32 bits (`seed=2**32` would repeat seed 0's run), `seeds=0`: each
    refused in a line that names the Python argument, not the command line's option."""
    monkeypatch.chdir(tmp_path)
    config = Config.create(total_env_steps=256)
    for flag in ("out", "resume"):
        with pytest.raises(ConfigError, match=f"^{flag}: an empty path"):
            rlax_trpo.run(config, **{flag: ""}, progress=False)
    with pytest.raises(ConfigError, match="^seed: must be an integer from 0 to 4294967294"):
        rlax_trpo.run(config, seed=2**32, out=tmp_path / "run", progress=False)
    for name, flag in (("seeds", "seeds"), ("chunk_iterations", "chunk_iterations")):
        with pytest.raises(ConfigError, match=f"^{flag}: must be a positive integer"):
            rlax_trpo.run(config, **{name: 0}, out=tmp_path / "run", progress=False)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="^out: '.*old' exists and is not empty; give a new"):
        rlax_trpo.run(config, out=tmp_path / "old", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


@pytest.mark.skipif(
    conftest.ACCELERATOR,
    reason="on an accelerator the devices' own memory is checked "
    "(test_on_a_gpu_the_memory_is_the_devices_own)",
)
def test_a_population_the_host_cannot_hold_is_refused_before_anything_is_allocated(
    tmp_path, capsys, monkeypatch
):
    """The state and one rollout of the population against the host's available memory
    (here 1 kB): one line with the estimate, exit 2, nothing written."""
    from rlax_trpo.experiment import parallel

    monkeypatch.setattr(memory_check, "host_memory_available", lambda: 1000)
    placed = []  # nothing is put on a device before the check (keys, settings: 100M seeds' GBs)
    monkeypatch.setattr(parallel, "put", lambda *args: placed.append(args) or args[0])
    out = tmp_path / "run"
    assert train.main(["--seeds", "2", SMALL, "--out", str(out), "--no-progress"]) == 2
    assert placed == []
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: --seeds: 1 setting(s) x 2 seed(s) = 2"), err
    assert "more than the 1.0 kB available on this host" in err, err
    assert not out.exists()


class _FakeGPU:
    platform, device_kind, process_index = "gpu", "Fake GPU", 0

    def memory_stats(self):
        return {"bytes_limit": 2_000_000, "bytes_in_use": 1_000_000}


def test_on_a_gpu_the_memory_is_the_devices_own(monkeypatch):
    """On devices that report their memory (`memory_stats`), their free memory counts, not
    the host's."""
    config = Config.create(total_env_steps=256)
    program = driver.make_program(config)
    checked = _plan(config, seeds=64)._replace(num_iterations=program.num_iterations)
    monkeypatch.setattr(memory_check.jax, "devices", lambda: [_FakeGPU()])
    with pytest.raises(
        ConfigError, match=r"more than the 1.0 MB of 1 GPU device\(s\) \(Fake GPU\)"
    ):
        memory_check.check_memory(checked, program)
    monkeypatch.setattr(_FakeGPU, "memory_stats", lambda self: None)  # says nothing: no check
    memory_check.check_memory(checked, program)


def test_a_signal_before_the_run_begins_stops_it_at_once(tmp_path, monkeypatch):
    """Planning, building and placing a run (tracing its initialisation) write nothing, so a
    signal there stops the run at once (not after its first chunk): one line, exit status
    128 + signal, no run folder. tests/test_resume.py has the signals once it has begun."""
    build = driver.build

    def signalled_build(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the build runs Python code
        return build(*args)

    monkeypatch.setattr(driver, "build", signalled_build)
    handler = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    with pytest.raises(RunFailed) as stopped:
        rlax_trpo.run(Config.create(total_env_steps=256), out=out, progress=False)
    assert str(stopped.value) == "interrupted by SIGTERM before the run began; nothing was written"
    assert stopped.value.status == 128 + signal.SIGTERM
    assert not out.exists()
    assert signal.getsignal(signal.SIGTERM) is handler  # the handlers are given back
