"""Networks by name: a user's Flax module registered with `register_network`, named in YAML,
trained, evaluated, resumed and loaded from the command line in fresh processes; the built-in
`item_attention` over a task's items; one line and exit 2 for every bad name or argument."""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import conftest
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import yaml

import rlax_trpo
import train
from rlax_trpo.config.configuration import config_from_dict
from rlax_trpo.envs import make_env
from rlax_trpo.experiment import checkpoint
from rlax_trpo.networks import make_networks

HERE = Path(__file__).resolve().parent
CLI = "import sys\nfrom rlax_trpo.cli import main\nsys.exit(main())"
ENV = {**__import__("os").environ, **conftest.SAME_BACKEND}
TRAIN = ["train", "--import", "user_network", "--config", "ppo_cartpole", "network=one_layer",
         "network_kwargs={width: 16}", "total_env_steps=4096", "--no-progress"]  # fmt: skip


def command(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's directory holding their network module (imported as the working directory's)."""
    folder = tmp_path_factory.mktemp("my_networks")
    shutil.copy(HERE / "user_network.py", folder / "user_network.py")
    return folder


def test_a_registered_network_trains_evaluates_resumes_and_loads(project):
    run, chunked = project / "run", project / "chunked"
    trained = command(project, *TRAIN, "--out", str(run))
    assert trained.returncode == 0, trained.stderr[-3000:]
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["network"] == "one_layer" and recorded["network_kwargs"] == {"width": 16}
    assert recorded["imports"] == ["user_network"]
    assert np.isfinite(json.loads((run / "summary.json").read_text())["eval_return_mean"])

    evaluated = command(project, "eval", "--run", str(run))
    assert evaluated.returncode == 0 and "greedy:" in evaluated.stdout, evaluated.stderr[-3000:]

    # Interrupted after its first chunk, resumed in a fresh process: the same metrics.
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *TRAIN, "--out", str(chunked), "--chunk-iterations", "8"],
        cwd=project, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 300
    while not (chunked / "config.yaml").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert checkpoint.read_meta(chunked / "checkpoint")["iterations_done"] < 32
    resumed = command(project, "train", "--resume", str(chunked), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (chunked / "metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()

    # load_policy in a fresh process: the user's layer, 16 wide, under the library's head.
    script = (
        "import jax, rlax_trpo\n"
        f"p = rlax_trpo.load_policy({str(run)!r})\n"
        "layer = p.state.params.policy['params']['net']['user_layer']['kernel']\n"
        "obs, _ = p.env.reset(jax.random.key(0))\n"
        "print(layer.shape, int(p.act(obs)))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], cwd=project, env=ENV, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    shape, action = loaded.stdout.split(") ")
    assert shape == "(4, 16" and action.strip() in ("0", "1"), loaded.stdout


def _refused(args, tmp_path, capsys) -> str:
    out = tmp_path / "run"
    assert train.main([*args, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not out.exists(), err
    return err[0]


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["network=item_atention"], "error: network: unknown network 'item_atention' (did you "
         "mean 'item_attention'? known: auto, mlp, cnn, bad_shape, flat_dense, grid, "
         "item_attention, linear, one_layer)"),
        (["network=mlp", "network_kwargs={width: 8}"],
         "error: network_kwargs: read by registered networks only, not mlp"),
        (["network=one_layer", "network_kwargs={widht: 8}"],
         "error: network_kwargs: network one_layer does not take them (got an unexpected "
         "keyword argument 'widht')"),
        (["network=one_layer", "memory=gru"],
         "error: memory: network one_layer (registered) has no memory cell; use none"),
        (["network=bad_shape"], "error: network: bad_shape's policy gives shape (1, 3) for "
         "one observation; expected (1, 2) (2 outputs, one per action)"),
        (["network=item_attention"], "error: network: item_attention needs discrete actions "
         "and an observation of fields with 2 items each (Jumanji's Knapsack, TSP)"),
    ],
    ids=["unknown", "kwargs_of_mlp", "unknown_kwarg", "memory", "bad_shape", "not_items"],
)  # fmt: skip
def test_bad_networks_are_one_line_and_exit_2(overrides, line, tmp_path, capsys):
    args = [
        "--import",
        str(HERE / "user_network.py"),
        "--config",
        "ppo_cartpole",
        *overrides,
        "total_env_steps=2048",
    ]  # fmt: skip (short, should a mutant let it train)
    assert _refused(args, tmp_path, capsys) == line


def test_a_whole_registered_network_gives_the_logits_and_values():
    """`outputs="heads"`: the module's own outputs are the logits and the values (no head)."""
    rlax_trpo.config.plugins.import_plugin(str(HERE / "user_network.py"))
    config = config_from_dict({"env": "CartPole-v1", "network": "linear"})
    nets = make_networks(config, make_env("CartPole-v1").spec)
    params = nets.init(jax.random.key(0))
    obs = jax.random.normal(jax.random.key(1), (5, 4))
    w = params.policy["params"]["net"]["user_linear"]
    np.testing.assert_allclose(nets.policy(params.policy, obs).logits, jax.nn.log_softmax(
        obs @ w["kernel"] + w["bias"]), rtol=1e-5, atol=1e-6)  # fmt: skip
    v = params.value["params"]["net"]["user_linear"]
    want = (obs @ v["kernel"] + v["bias"])[:, 0]
    np.testing.assert_allclose(nets.value(params.value, obs), want, rtol=1e-5, atol=1e-6)


def test_a_registered_network_reads_observations_as_the_environment_gives_them():
    """MinAtar's images reach a registered torso as images (an MLP would get vectors)."""
    user = rlax_trpo.config.plugins.import_plugin(str(HERE / "user_network.py"))
    config = config_from_dict({"env": "Breakout-MinAtar", "network": "flat_dense"})
    rlax_trpo.make_trainer(config)
    assert user.SEEN_SHAPES[-2:] == [(10, 10, 4)] * 2  # the policy's and the critic's


@pytest.fixture(scope="module")
def knapsack():
    config = config_from_dict({
        "env": "jumanji/Knapsack-v1", "network": "item_attention",
        "network_kwargs": {"width": 16, "heads": 2, "blocks": 1}})  # fmt: skip
    env = make_env(config.env)
    nets = make_networks(config, env.spec)
    return env, nets, nets.init(jax.random.key(0))


def test_item_attention_is_equivariant_to_the_order_of_the_items(knapsack):
    """Permuting Knapsack's items permutes the logits the same way and leaves the value."""
    env, nets, params = knapsack
    obs = jax.vmap(lambda k: env.reset(k)[0])(jax.random.split(jax.random.key(2), 3))
    perm = jax.random.permutation(jax.random.key(3), 50)
    fields = obs.reshape(3, 4, 50)  # weights, values, packed_items, action_mask
    permuted = fields[:, :, perm].reshape(3, 200)
    logits = nets.policy(params.policy, obs).logits
    np.testing.assert_allclose(
        nets.policy(params.policy, permuted).logits, logits[:, perm], rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(
        nets.value(params.value, permuted), nets.value(params.value, obs), rtol=1e-4, atol=1e-6
    )
    assert float(jnp.std(logits)) > 0  # not a constant network


def test_item_attention_reads_every_field_of_the_items(knapsack):
    """Each item's logit depends on its own weight and value (the fields are cut right)."""
    env, nets, params = knapsack
    obs = env.reset(jax.random.key(4))[0]
    grads = jax.jacobian(lambda o: nets.policy(params.policy, o).logits)(obs)  # [50, 200]
    per_field = jnp.abs(grads.reshape(50, 4, 50))
    own = jnp.stack([jnp.diagonal(per_field[:, f]) for f in range(4)])  # [field, item]
    assert bool((own[:2] > 0).all())  # weights and values reach their own item's logit


@pytest.fixture(scope="module")
def minesweeper():
    config = config_from_dict({
        "env": "jumanji/Minesweeper-v0", "network": "grid",
        "network_kwargs": {"categories": [-1, 10], "channels": [16, 16], "width": 8}})  # fmt: skip
    env = make_env(config.env)
    nets = make_networks(config, env.spec)
    board = jax.random.randint(jax.random.key(5), (100,), -1, 9).astype(jnp.float32)
    counts = jnp.array([10.0, 3.0])  # mines, steps
    obs = jnp.concatenate([board, (board == -1).astype(jnp.float32), counts])
    return env, nets, nets.init(jax.random.key(0)), obs


def _sharp(params):
    """The policy with its per-cell head x100: differences in the logits well above float
    rounding."""
    head = params.policy["params"]["net"]["Dense_3"]
    net = {**params.policy["params"]["net"], "Dense_3": {**head, "kernel": 100 * head["kernel"]}}
    return params._replace(policy={"params": {"net": net}})


def _logits(nets, params, obs, far=0):
    """The policy's logits less that of cell `far` (log-softmax shifts them all alike)."""
    logits = nets.policy(params.policy, obs).logits
    return logits - logits[..., far : far + 1]


@pytest.mark.parametrize("cell", [(0, 0), (4, 7), (9, 3)])
def test_grid_gives_each_cell_a_logit_from_its_neighbourhood(minesweeper, cell):
    """Two 3x3 convolutions: revealing cell (r, c) moves exactly the logits of the cells
    within 2 of it (row-major), and the mask's cells reach the logits the same way."""
    env, nets, params, obs = minesweeper
    params = _sharp(params)
    r, c = cell
    rows, cols = np.divmod(np.arange(100), 10)
    near = (np.abs(rows - r) <= 2) & (np.abs(cols - c) <= 2)
    far = int(np.argmax(np.maximum(np.abs(rows - r), np.abs(cols - c))))
    changed = obs.at[r * 10 + c].set((obs[r * 10 + c] + 6) % 10 - 1)  # another category
    moved = np.abs(_logits(nets, params, changed, far) - _logits(nets, params, obs, far)) > 1e-5
    assert moved[r * 10 + c] and not moved[~near].any(), np.argwhere(moved)
    grads = jax.jacobian(lambda o: _logits(nets, params, o, far))(obs)  # [100, 202]
    reach = np.abs(np.asarray(grads[:, 100:200])[:, r * 10 + c]) > 1e-6
    assert reach[r * 10 + c] and not reach[~near].any(), np.argwhere(reach)
    assert (np.abs(np.asarray(grads[:, 200:])) > 1e-6).any()  # the counters reach the logits


def test_grid_reads_each_category_of_the_board_as_its_own(minesweeper):
    """Each of Minesweeper's values -1 .. 8 at a cell gives its own logits; a value outside
    the categories (none of them) differs from every one."""
    env, nets, params, obs = minesweeper
    params = _sharp(params)
    seen = [_logits(nets, params, obs.at[44].set(v))[44] for v in [*range(-1, 9), 20]]
    gaps = np.abs(np.subtract.outer(seen, seen))[~np.eye(11, dtype=bool)]
    assert gaps.min() > 1e-5, gaps.min()
    values = nets.value(params.value, jnp.stack([obs, obs.at[44].set(0.0)]))
    assert abs(float(values[0] - values[1])) > 1e-7  # the critic reads the board too


def test_grid_on_a_board_of_channels_with_other_actions():
    """Snake's grid [12, 12, 5] with 4 actions: the logits come from the flattened board."""
    config = config_from_dict({"env": "jumanji/Snake-v1", "network": "grid",
                               "network_kwargs": {"channels": [4], "width": 8}})  # fmt: skip
    env = make_env(config.env)
    nets = make_networks(config, env.spec)
    params = nets.init(jax.random.key(0))
    obs = jax.vmap(lambda k: env.reset(k)[0])(jax.random.split(jax.random.key(1), 2))
    logits, values = nets.policy(params.policy, obs).logits, nets.value(params.value, obs)
    assert logits.shape == (2, 4) and values.shape == (2,)
    assert float(jnp.abs(logits[0] - logits[1]).max()) > 1e-7  # two boards, two policies


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["network_kwargs={categories: [-1, 10]}", "normalize_obs=true"],
         "error: normalize_obs: network grid reads categories of the raw board; use "
         "normalize_obs=false"),
        (["network_kwargs={grid: boards}"], "error: network: grid needs a board field of two "
         "or more dimensions (got grid='boards'; this observation's boards: board, "
         "action_mask)"),
        (["network_kwargs={categories: [10]}"],
         "error: network_kwargs.categories: expected [low, count] (got [10])"),
        (["network_kwargs={categories: [a, 2]}"],
         "error: network_kwargs.categories: expected [low, count] (got ['a', 2])"),
    ],
    ids=["normalized_categories", "unknown_grid", "bad_categories", "categories_not_ints"],
)  # fmt: skip
def test_bad_grids_are_one_line_and_exit_2(overrides, line, tmp_path, capsys):
    args = ["--config", "ppo_cartpole", "env=jumanji/Minesweeper-v0", "network=grid",
            *overrides, "total_env_steps=2048"]  # fmt: skip
    assert _refused(args, tmp_path, capsys) == line


def test_grid_needs_a_board(tmp_path, capsys):
    args = ["--config", "ppo_cartpole", "network=grid", "total_env_steps=2048"]
    assert _refused(args, tmp_path, capsys) == (
        "error: network: grid needs a board field of two or more dimensions (got grid=None; "
        "this observation's boards: none)"
    )


def test_grid_names_its_board_and_reads_the_other_planes_as_they_are():
    """`grid: action_mask` with categories [0, 2]: the mask is one-hot, Minesweeper's board
    (the first field) joins it as a raw channel, each of its values its own logits."""
    config = config_from_dict({
        "env": "jumanji/Minesweeper-v0", "network": "grid",
        "network_kwargs": {"grid": "action_mask", "categories": [0, 2], "channels": [16, 16],
                           "width": 8}})  # fmt: skip
    nets = make_networks(config, make_env(config.env).spec)
    params = _sharp(nets.init(jax.random.key(0)))
    obs = jnp.concatenate([jnp.zeros(100), jnp.ones(100), jnp.array([10.0, 0.0])])
    seen = [_logits(nets, params, obs.at[44].set(v))[44] for v in range(-1, 9)]
    gaps = np.abs(np.subtract.outer(seen, seen))[~np.eye(10, dtype=bool)]
    assert gaps.min() > 1e-5, gaps.min()
