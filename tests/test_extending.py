"""Extending the library from outside the package.

docs/extending.md's example files (A2C, a point-mass environment, a YAML and a script) are
copied out of the page into a directory outside the package and run exactly as printed, from
the command line in fresh processes: train with `--import`, evaluate, interrupt and resume a
chunked run, act with `load_policy`. An installed package's entry point loads the same way.
Then an algorithm and an environment defined in this file, registered through the public API
and trained with `rlax_trpo.run`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import conftest
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml
from flax import struct
from gymnax.environments import environment, spaces

import rlax_trpo
import rlax_trpo.config as config_lib
from rlax_trpo import Algorithm, Config, ConfigError
from rlax_trpo.advantages import monte_carlo_from_env
from rlax_trpo.algorithms import sections
from rlax_trpo.algorithms.common import (
    flatten_batch,
    make_optimizer,
    optimizer_step,
    set_learning_rate,
)
from rlax_trpo.config.plugins import import_plugin
from rlax_trpo.envs import Env, EnvSpec, StepResult, valid_env_names
from rlax_trpo.experiment import checkpoint
from rlax_trpo.losses import normalize, policy_gradient_loss
from rlax_trpo.types import Batch, Params, Trajectory

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"
# A code block that declares a file: its first line is `# NAME.py` or `# NAME.yaml`.
FILE_BLOCK = re.compile(
    r"```(?:python|yaml)\n# (?P<name>[\w.]+\.(?:py|yaml))\n(?P<body>.*?)```", re.S
)
# The console command's own lines (`rlax-trpo` = `rlax_trpo.cli:main`); like the installed
# script, and unlike `python -c`, it does not put the working directory on sys.path.
CLI = "\n".join(
    [
        "import sys",
        "if sys.path[0] in ('', '.'): del sys.path[0]",
        "from rlax_trpo.cli import main",
        "sys.exit(main())",
    ]
)
SMALL = ["total_env_steps=4096", "--no-progress"]  # 32 iterations of 16 envs x 8 steps
ENV = {**os.environ, **conftest.SAME_BACKEND}


def doc_files() -> dict[str, str]:
    """The files docs/extending.md declares, as printed."""
    text = DOC.read_text()
    return {m["name"]: f"# {m['name']}\n{m['body']}" for m in FILE_BLOCK.finditer(text)}


def doc_commands() -> list[list[str]]:
    """The `rlax-trpo ...` lines of the page's shell blocks, as argument lists."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("rlax-trpo ")]


def command(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's directory, outside the package, holding the page's files."""
    folder = tmp_path_factory.mktemp("my_project")
    files = doc_files()
    assert {"a2c.py", "point_mass.py", "my.yaml", "play.py"} <= set(files), sorted(files)
    for name, text in files.items():
        (folder / name).write_text(text)
    assert str(folder) not in ENV.get("PYTHONPATH", "")  # found as the working directory
    return folder


def test_the_page_documents_the_real_records():
    """Every record the page lists has the fields, in order, of the library's record."""
    text = DOC.read_text()
    for cls in (Algorithm, Params, Trajectory, Batch, Env, StepResult, EnvSpec):
        pattern = rf"^( *)class {cls.__name__}\(NamedTuple\):.*\n((?:\1    .*\n)+)"
        block = re.search(pattern, text, re.M)
        assert block is not None, f"{cls.__name__} is not on the page"
        documented = re.findall(r"^ +(\w+):", block[2], re.M)
        assert tuple(documented) == cls._fields, (cls.__name__, documented)
    shared = re.search(r"`rlax_trpo\.config\.ControlFields`: (.*?)\)", text, re.S)[1]
    assert re.findall(r"`(\w+)`", shared) == list(config_lib.ControlFields.model_fields)
    # The table of shared groups lists each group's fields.
    for name, row in re.findall(r"^\| `(\w+)` \| (.*?) \|", text, re.M):
        group = getattr(sections, name, None) or getattr(config_lib, name, None)
        if group is None:
            continue
        listed = {n.removeprefix("hp.") for n in re.findall(r"`([\w.]+)`", row)}
        fields = set(group.names()) if hasattr(group, "names") else set(group.model_fields)
        assert listed == fields, (name, listed, fields)


def test_the_pages_example_runs_from_the_command_line(project):
    """train --import, eval --run, an interrupted chunked run resumed to the same metrics,
    and load_policy in a fresh process: all from the user's directory, as printed."""
    commands = doc_commands()
    train_cmd = next(c for c in commands if c[0] == "train")
    eval_cmd = next(c for c in commands if c[0] == "eval")
    assert "--import" in train_cmd and "--config" in train_cmd
    run = project / train_cmd[train_cmd.index("--out") + 1]

    trained = command(project, *train_cmd, *SMALL)
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["algorithm"], summary["env"], summary["num_seeds"]) == (
        "a2c", "PointMass-v0", 2)  # fmt: skip
    assert np.isfinite(summary["eval_return_mean"])
    assert yaml.safe_load((run / "config.yaml").read_text())["imports"] == ["a2c", "point_mass"]

    evaluated = command(project, *eval_cmd)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "a2c on PointMass-v0" in evaluated.stdout and "greedy:" in evaluated.stdout

    # The YAML route: the page's `imports:` line above its my.yaml, no --import flags.
    imports_line = re.search(r"```yaml\n(imports: .*)\n```", DOC.read_text())[1]
    (project / "my_imports.yaml").write_text(imports_line + "\n" + doc_files()["my.yaml"])
    chunked = project / "runs" / "chunked"
    argv = ["train", "--config", "my_imports.yaml", "--seeds", "2", "--out", str(chunked),
            "--chunk-iterations", "8", *SMALL]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *argv],
        cwd=project, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # config.yaml appears once the signal handlers are installed (before compilation); the
    # run stops cleanly after the call the signal came in (seconds).
    deadline = time.time() + 300
    while not (chunked / "config.yaml").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "interrupted by SIGINT" in err and "--resume" in err
    assert 1 <= checkpoint.read_meta(chunked / "checkpoint")["iterations_done"] < 32
    resumed = command(project, "train", "--resume", str(chunked), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (chunked / "metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()

    played = subprocess.run(
        [sys.executable, "play.py"], cwd=project, env=ENV, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr[-3000:]
    first = played.stdout.splitlines()[0]
    assert re.fullmatch(r"100 steps, return -\d+\.\d\d", first), played.stdout


@pytest.mark.slow
def test_the_pages_a2c_learns_cartpole(project, tmp_path):
    """The page's A2C, unchanged, at 40,960 steps: a random policy lasts ~22 steps on
    CartPole. A2C's seeds spread widely at this budget (final returns 55 to 500 over 8 seeds
    on a 2-core AMD EPYC; two seeds averaged 121 on one machine and over 150 on another), so
    the median of 8 vmapped seeds is held to 100 (it was 266 there). With the advantage's
    sign flipped every seed stays below 10."""
    import_plugin(str(project / "a2c.py"))
    config = Config.create(
        algorithm="a2c",
        env="CartPole-v1",
        num_envs=8,
        num_steps=16,
        total_env_steps=40_960,
        hp={"learning_rate": 3e-3},
    )
    result = rlax_trpo.run(config, seeds=8, out=tmp_path / "run", progress=False)
    first = np.nanmean(result.metrics["episode/return"][:, :5])
    finals = result.summary["final_return_per_seed"]
    assert first < 40 and np.median(finals) > 100, (first, finals)


def test_an_installed_packages_entry_point_is_loaded(tmp_path):
    """A `rlax_trpo.plugins` entry point of a distribution on the Python path is imported
    whenever a configuration is validated; a broken one is one line, exit 2."""
    site = tmp_path / "site"
    info = site / "my_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlax_trpo.plugins]\nmine = my_plugin_module\n")
    (site / "my_plugin_module.py").write_text(
        "from rlax_trpo import register_algorithm\n"
        "from rlax_trpo.algorithms.vpg import SPEC\n\n"
        "register_algorithm('vpg_by_entry_point', SPEC)\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = os.pathsep.join(p for p in (str(site), ENV.get("PYTHONPATH")) if p)
    show = ["configs", "--show", "default", "algorithm=vpg_by_entry_point"]

    shown = command(elsewhere, *show, env={**ENV, "PYTHONPATH": path})
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert re.search(r"^algorithm: vpg_by_entry_point +# override$", shown.stdout, re.M)
    assert re.search(r"^value_epochs: 10 +# default$", shown.stdout, re.M), shown.stdout

    (info / "entry_points.txt").write_text("[rlax_trpo.plugins]\nmine = not_there_module\n")
    broken = command(elsewhere, *show, env={**ENV, "PYTHONPATH": path})
    assert broken.returncode == 2, broken.stderr[-3000:]
    line = broken.stderr.strip()
    assert "\n" not in line and line.startswith("error: plugin entry point 'mine'"), line
    assert "not_there_module" in line


# --- a toy algorithm: REINFORCE with normalised Monte-Carlo returns, no critic ------------


class ToyState(NamedTuple):
    opt_state: Any


def make_toy_reinforce(config: Config, networks) -> Algorithm:
    optimizer = make_optimizer(config)

    def init(params: Params, hp) -> ToyState:
        return ToyState(optimizer.init(params.policy))

    def make_batch(params: Params, traj, hp) -> Batch:
        zeros = jnp.zeros_like(traj.reward)
        returns = monte_carlo_from_env(
            traj.reward, zeros, zeros, traj.terminated, traj.truncated, hp.gamma
        )
        return Batch(traj.obs, traj.action, traj.log_prob, returns, zeros, zeros)

    def update(params: Params, state: ToyState, batch: Batch, hp, key):
        flat = flatten_batch(batch)

        def loss(policy):
            log_prob = networks.policy(policy, flat.obs).log_prob(flat.action)
            return policy_gradient_loss(log_prob, normalize(flat.advantage))

        grads = jax.grad(loss)(params.policy)
        opt_state = set_learning_rate(state.opt_state, hp.learning_rate)
        policy, opt_state, norm = optimizer_step(
            optimizer, params.policy, opt_state, grads, hp.max_grad_norm
        )
        return Params(policy, None), ToyState(opt_state), {"toy/grad_norm": norm}

    return Algorithm(init, make_batch, update, critic=False)


def test_a_toy_algorithm_registers_and_trains_with_run(tmp_path):
    with pytest.raises(ConfigError, match="toy_reinforce"):
        Config.create(algorithm="toy_reinforce")  # unknown before it is registered
    rlax_trpo.register_algorithm(
        "toy_reinforce",
        make_toy_reinforce,
        fields=sections.OptimizerFields,
        hparams=sections.OptimizerHParams,
    )
    assert "toy_reinforce" in rlax_trpo.algorithm_names()
    config = Config.create(
        algorithm="toy_reinforce",
        env="CartPole-v1",
        num_envs=8,
        num_steps=128,
        total_env_steps=40_960,
        anneal_lr=False,
        hp={"learning_rate": 1e-2, "gamma": 0.99, "max_grad_norm": 1.0},
    )
    result = rlax_trpo.run(config, seeds=2, out=tmp_path / "run", progress=False)
    assert result.status == "complete"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["algorithm"] == "toy_reinforce" and summary["num_seeds"] == 2
    assert result.state.params.value is None  # critic=False: no value network
    ret = result.metrics["episode/return"]
    assert np.isfinite(result.metrics["toy/grad_norm"]).all()
    # A random CartPole policy lasts ~22 steps; REINFORCE at this budget roughly triples it.
    first, last = np.nanmean(ret[:, :3]), summary["final_return_mean"]
    assert first < 40 and last > 60, (first, last)


def test_the_documented_registration_without_fields_makes_configs(tmp_path, capsys):
    """`register_algorithm(name, "module:attribute")`, `fields` left at its default (no
    fields of its own): its configs are the shared fields (pydantic refused to build their
    class: an MRO TypeError, exit 1 under `train --import`). A field its factory reads
    without declaring it is one line, exit 2, nothing written; parts of the wrong kind are
    refused when they are registered."""
    import train

    plugin = tmp_path / "my_ppo_plugin.py"
    plugin.write_text(
        "from rlax_trpo import register_algorithm\n"
        'register_algorithm("my_ppo", "rlax_trpo.algorithms.ppo:make_ppo")\n'
    )
    import_plugin(str(plugin))
    config = Config.create(algorithm="my_ppo", num_envs=4)
    assert config.num_envs == 4 and config.to_dict()["hp"] == {"gamma": pytest.approx(0.99)}
    assert set(config.to_dict()) == {*config_lib.ControlFields.model_fields, "hp"}
    with pytest.raises(ConfigError, match="num_epochs: not read by algorithm my_ppo; read by ppo"):
        Config.create(algorithm="my_ppo", num_epochs=2)

    out = tmp_path / "run"
    argv = ["--import", str(plugin), "algorithm=my_ppo", "--out", str(out), "--no-progress"]
    assert train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: optimizer: algorithm my_ppo reads a field it does not declare")
    assert "\n" not in err and not out.exists(), err

    # The kind's shared fields themselves as `fields`; then parts of the wrong kind.
    rlax_trpo.register_algorithm("toy_shared", make_toy_reinforce, fields=config_lib.ControlFields)
    assert Config.create(algorithm="toy_shared").env == "CartPole-v1"
    for part, wrong in (("fields", dict), ("hparams", sections.OptimizerFields), ("base", int)):
        with pytest.raises(ValueError, match=f"register_algorithm: {part} must be a subclass"):
            rlax_trpo.register_algorithm("wrong", make_toy_reinforce, **{part: wrong})
    assert "wrong" not in rlax_trpo.algorithm_names()


# --- a user environment: a one-step bandit whose arm 1 pays 1 ----------------------------


@struct.dataclass
class ArmState(environment.EnvState):
    time: int


@struct.dataclass
class ArmParams(environment.EnvParams):
    max_steps_in_episode: int = 1


class TwoArms(environment.Environment[ArmState, ArmParams]):
    @property
    def default_params(self) -> ArmParams:
        return ArmParams()

    def step_env(self, key, state, action, params):
        reward = (jnp.asarray(action) == 1).astype(jnp.float32)
        state = state.replace(time=state.time + 1)
        return self.get_obs(state), state, reward, jnp.array(True), {}

    def reset_env(self, key, params):
        state = ArmState(time=0)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jnp.ones((2,), jnp.float32)

    def is_terminated(self, state, params):
        return jnp.array(True)

    def is_truncated(self, state, params):
        return jnp.array(False)

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)


def test_a_user_environment_registers_and_trains(tmp_path):
    rlax_trpo.register_env("TwoArms-test", lambda: (TwoArms(), ArmParams()))
    assert "TwoArms-test" in valid_env_names()
    config = Config.create(
        algorithm="ppo",
        env="TwoArms-test",
        num_envs=16,
        num_steps=8,
        total_env_steps=2048,
        num_minibatches=2,
        hp={"learning_rate": 1e-2, "ent_coef": 0.0},
    )
    result = rlax_trpo.run(config, seeds=1, out=tmp_path / "run", progress=False)
    assert result.summary["env"] == "TwoArms-test"
    assert result.summary["eval_return_mean"] == 1.0  # the greedy policy pulls arm 1
    assert result.summary["final_return_mean"] > 0.9
