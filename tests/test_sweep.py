"""Sweeps (settings x seeds in one compiled call), their statistics, evaluation of a finished
run folder (greedy and sampling, GIF), TensorBoard logging, and bad input for the new flags."""

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import train
from rlax_trpo import Config
from rlax_trpo.config.sweep import (
    parse_sweeps,
    population_hparams,
    population_key_data,
    setting_label,
)
from rlax_trpo.errors import ConfigError
from rlax_trpo.report.run_files import format_summary
from rlax_trpo.report.stats import bootstrap_ci, iqm

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--no-progress",
    "num_envs=4",
    "num_steps=16",
    "total_env_steps=320",
    "num_epochs=1",
    "num_minibatches=1",
    "eval_episodes=2",
]
SWEEP = [
    "--seeds",
    "4",
    "--sweep",
    "hp.learning_rate=1e-4,3e-4,1e-3",
    "--sweep",
    "hp.clip_eps=0.1,0.2",
]


def _backend_compiles(argv) -> list[str]:
    """Run train.py in this process; the XLA programs compiled meanwhile (by event)."""
    compiled = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(kwargs.get("fun_name", "?"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        assert train.main(argv) == 0
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return compiled


def test_a_sweep_compiles_no_more_programs_than_one_member(tmp_path, no_compilation_cache):
    # 3 settings x 4 seeds run in the same programs as a single member: no per-member compile,
    # and chunks of 2, 2 and 1 iterations are calls of the one segment program.
    sweep = [
        "--seeds",
        "4",
        "--sweep",
        "hp.learning_rate=1e-4,3e-4,1e-3",
        "--chunk-iterations",
        "2",
    ]
    many = _backend_compiles([*sweep, *TINY, "--out", str(tmp_path / "many")])
    one = _backend_compiles([*TINY, "--out", str(tmp_path / "one")])
    programs = {"jit(init_population)", "jit(run)", "jit(evaluate_population)"}
    main = sorted(n for n in many if n in programs)
    assert main == sorted(n for n in one if n in programs) == sorted(programs), (many, one)
    summary = json.loads((tmp_path / "many" / "summary.json").read_text())
    assert summary["population"] == 12 and summary["compiled_run_programs"] == 1


def test_iqm_and_bootstrap():
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0])) == 2.5  # drops 1 and 4
    assert iqm(np.array([100.0, 1, 2, 3, 4, 5, 6, -100])) == 3.5  # drops 2 at each end
    assert iqm(np.array([7.0])) == 7.0
    x = np.array([1.0, 2.0, 3.0, 10.0])
    lo, hi = bootstrap_ci(x)
    assert lo <= x.mean() <= hi and x.min() <= lo and hi <= x.max()
    assert bootstrap_ci(x) == (lo, hi)  # deterministic
    assert bootstrap_ci(np.array([5.0])) == (5.0, 5.0)


def test_population_layout_is_setting_major():
    config = Config.create()
    sweep = parse_sweeps(["hp.learning_rate=1e-4,1e-3", "hp.clip_eps=0.1,0.2,0.3"], config)
    assert [s["hp.clip_eps"] for s in sweep.settings] == [0.1, 0.2, 0.3] * 2
    hp = population_hparams(config.hp, sweep, num_seeds=2)
    np.testing.assert_allclose(hp.learning_rate, [1e-4] * 6 + [1e-3] * 6, rtol=1e-6)
    np.testing.assert_allclose(hp.clip_eps[:6], [0.1, 0.1, 0.2, 0.2, 0.3, 0.3], rtol=1e-6)
    np.testing.assert_allclose(hp.gamma, np.full(12, 0.98, np.float32))
    keys = population_key_data(0, num_seeds=2, num_settings=6)
    assert keys.shape[0] == 12 and (keys[:2] == keys[2:4]).all() and (keys[0] != keys[1]).any()


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "run"
    tb = ["--tensorboard"] if _has("tensorboardX") else []
    assert train.main([*SWEEP, *TINY, *tb, "--out", str(out)]) == 0
    return out


def test_sweep_3x2_with_4_seeds_is_one_call(sweep_run):
    summary = json.loads((sweep_run / "summary.json").read_text())
    assert summary["population"] == 24 and summary["num_settings"] == 6
    members = summary["members"]
    assert len(members) == 6
    assert [m["hp"] for m in members][:2] == [
        {"hp.learning_rate": 1e-4, "hp.clip_eps": 0.1},
        {"hp.learning_rate": 1e-4, "hp.clip_eps": 0.2},
    ]
    for m in members:
        finals = [f for f in m["final_return_per_seed"] if f is not None]
        assert len(m["final_return_per_seed"]) == 4
        np.testing.assert_allclose(m["final_return_mean"], np.mean(finals), rtol=1e-6)
        lo, hi = m["final_return_mean_ci95"]
        assert lo <= m["final_return_mean"] <= hi
        assert m["final_return_iqm"] == pytest.approx(iqm(np.array(finals)))
    best = max(
        range(6), key=lambda i: (members[i]["final_return_iqm"], members[i]["final_return_mean"])
    )
    assert summary["best"]["index"] == best and summary["best"]["hp"] == members[best]["hp"]
    assert (sweep_run / "sweep.png").stat().st_size > 0
    # Top-level return figures are the best setting's, never a pool of all 24 members.
    assert summary["final_return_mean"] == members[best]["final_return_mean"]
    assert summary["final_return_per_seed"] == members[best]["final_return_per_seed"]
    assert summary["eval_return_mean"] == pytest.approx(members[best]["eval_return_mean"])
    pooled = np.nanmean([f for m in members for f in m["final_return_per_seed"] if f is not None])
    if not np.isclose(pooled, members[best]["final_return_mean"]):
        assert summary["final_return_mean"] != pytest.approx(pooled)
    # The printed headline names the best setting and its IQM interval; a line per setting.
    text = format_summary(summary, sweep_run)
    label = setting_label(members[best]["hp"])
    assert f"best setting {label}: final return IQM" in text
    assert sum(line.startswith("  ") for line in text.splitlines()) == 6
    assert text.count("<- best") == 1

    with (sweep_run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 24 * 5
    assert {"hp.learning_rate", "hp.clip_eps", "seed"} <= set(rows[0])
    assert {r["hp.learning_rate"] for r in rows} == {"0.0001", "0.0003", "0.001"}
    assert {r["seed"] for r in rows} == {"0", "1", "2", "3"}
    # the learning rate each member actually used (annealed from its setting's value)
    first = [r for r in rows if r["iteration"] == "0"]
    for r in first:
        assert float(r["ppo/learning_rate"]) == pytest.approx(
            float(r["hp.learning_rate"]), rel=1e-5
        )


@pytest.mark.skipif(not _has("tensorboardX"), reason="tensorboardX not installed")
def test_tensorboard_events_written(sweep_run):
    folders = sorted(p.name for p in (sweep_run / "tensorboard").iterdir())
    assert len(folders) == 6 and "learning_rate=0.0001,clip_eps=0.1" in folders
    events = list((sweep_run / "tensorboard").rglob("events.out.tfevents.*"))
    assert len(events) == 6 and all(e.stat().st_size > 100 for e in events)


def _read_events(folder: Path) -> dict[str, dict[int, float]]:
    """Scalars of a TensorBoard event file: tag -> {step: value} (TFRecord framing:
    8-byte length, 4-byte CRC, the Event proto, 4-byte CRC)."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, dict[int, float]] = {}
    for path in folder.glob("events.out.tfevents.*"):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            length = int.from_bytes(data[pos : pos + 8], "little")
            event = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + length])
            pos += 16 + length
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


@pytest.mark.skipif(not _has("tensorboardX"), reason="tensorboardX not installed")
def test_tensorboard_scalars_are_the_per_setting_means_of_the_csv(sweep_run):
    with (sweep_run / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["hp.learning_rate"] == "0.0003"]
    rows = [r for r in rows if r["hp.clip_eps"] == "0.2"]
    events = _read_events(sweep_run / "tensorboard" / "learning_rate=0.0003,clip_eps=0.2")
    assert {"episode/return", "ppo/clip_frac", "policy/entropy"} <= set(events)
    for it in range(5):
        at = [r for r in rows if r["iteration"] == str(it)]
        step = int(at[0]["env_steps"])
        expected = np.mean([float(r["policy/entropy"]) for r in at])
        assert events["policy/entropy"][step] == pytest.approx(expected, rel=1e-4)


def test_eval_and_gif_from_run_folder(sweep_run, capsys):
    # The GIF needs gymnasium's classic-control renderer (pygame, in the dev extra); without
    # it the evaluation alone is checked.
    gif = sweep_run.parent / "episode.gif"
    with_gif = ["--gif", str(gif)] if _has("pygame") else []
    argv = ["eval", "--run", str(sweep_run), "--episodes", "3", "--max-steps", "30"]
    code = train.main([*argv, *with_gif])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("greedy:") == 6 and out.count("sampling:") == 6  # a line per setting
    assert "+-" in out and "iteration 5 of 5" in out
    if with_gif:
        from PIL import Image

        with Image.open(gif) as im:
            assert im.format == "GIF" and im.n_frames >= 2
        assert "GIF of member" in out


@pytest.mark.skipif(not _has("pygame"), reason="pygame (classic-control renderer) not installed")
def test_gif_without_display_or_sound_prints_no_noise(sweep_run, tmp_path):
    # No DISPLAY, no audio device: the renderer must not probe either (ALSA/XDG warnings).
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "SDL_AUDIODRIVER")}
    gif = tmp_path / "quiet.gif"
    argv = [sys.executable, str(ROOT / "train.py"), "eval", "--run", str(sweep_run)]
    argv += ["--episodes", "1", "--max-steps", "40", "--member", "3", "--gif", str(gif)]
    proc = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.returncode == 0, proc.stdout
    assert "ALSA" not in proc.stdout and "XDG" not in proc.stdout, proc.stdout[:2000]
    assert len(proc.stdout.splitlines()) <= 10, proc.stdout[:2000]
    from PIL import Image

    with Image.open(gif) as im:
        assert im.n_frames >= 2 and im.size[0] >= 300


BAD = [
    (["--sweep", "num_envs=4,8"], "--sweep num_envs: is a static field"),
    (["--sweep", "hp.bogus=1,2"], "--sweep hp.bogus: not a hyperparameter of ppo; allowed:"),
    (
        ["--sweep", "hp.max_kl=0.01,0.02"],
        "--sweep hp.max_kl: not a hyperparameter of ppo; allowed:",
    ),
    (["--sweep", "hp.learning_rate=fast,slow"], "value 'fast' is not a number"),
    (["--sweep", "hp.learning_rate=-1,1e-3"], "hp.learning_rate: Input should be greater than 0"),
    (["--sweep", "hp.gamma"], "expected hp.name=v1,v2"),
    (["--sweep", "hp.gamma=0.9", "--sweep", "hp.gamma=0.99"], "given twice"),
    (["--sweep", "hp.gamma=0.9,0.9"], "repeated value"),
    (["--chunk-iterations", "0"], "--chunk-iterations: must be a positive integer"),
    (["--devices", "0"], "--devices: must be a positive integer"),
    (["--devices", "64"], "--devices: 64 is not between 1 and the"),
    (["--resume", "no/such/run"], "--resume: 'no/such/run' is not a run folder"),
    (["--shard", "rows"], "argument --shard: invalid choice"),
    (["eval", "--run", "no/such/run"], "--run: 'no/such/run' is not a run folder"),
    (["eval"], "the following arguments are required: --run"),
    (["eval", "--run", ".", "--episodes", "0"], "--episodes: must be a positive integer"),
]


@pytest.mark.parametrize("argv, expected", BAD, ids=[b[1][:32] for b in BAD])
def test_bad_flags_one_line_exit_2_nothing_written(argv, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    extra = [] if argv[0] == "eval" else ["--out", str(tmp_path / "run"), *TINY]
    code = train.main([*argv, *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and "\n" not in err, err
    assert expected in err, err
    assert list(tmp_path.iterdir()) == []


def test_parse_sweeps_refuses_static_fields_with_reason():
    with pytest.raises(ConfigError, match="fixes a shape or a loop length"):
        parse_sweeps(["hidden_sizes=1,2"], Config.create())
