"""`rlax-trpo report`: rliable's statistics over runs, checked against hand computations, and
the command end to end on tiny published results and run folders written here."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import trim_mean

from rlax_trpo import cli
from rlax_trpo.report import aggregate
from rlax_trpo.report.stats import few_seeds_note


def _rliable_problem() -> str | None:
    try:
        from rliable import library, metrics  # noqa: F401
    except Exception as err:  # absent, or a dependency of it broken (arch, pandas)
        return f"{type(err).__name__}: {err}"
    return None


RLIABLE_PROBLEM = _rliable_problem()
needs_rliable = pytest.mark.skipif(
    RLIABLE_PROBLEM is not None, reason=f"rliable cannot be imported: {RLIABLE_PROBLEM}"
)

# Known scores: 3 tasks x 2 algorithms x 5 seeds, with ties within and across algorithms.
SCORES = {
    ("ppo", "Alpha"): [1.0, 4.0, 2.0, 8.0, 5.0],
    ("trpo", "Alpha"): [3.0, 3.0, 6.0, 7.0, 2.0],
    ("ppo", "Beta"): [10.0, 30.0, 20.0, 25.0, 15.0],
    ("trpo", "Beta"): [12.0, 18.0, 40.0, 35.0, 30.0],
    ("ppo", "Gamma"): [-5.0, 0.0, 5.0, 2.0, 1.0],
    ("trpo", "Gamma"): [-1.0, -2.0, 0.0, 1.0, 2.0],
}
TASKS = ["Alpha", "Beta", "Gamma"]


def _summary(algo: str, env: str, scores: list, **extra) -> dict:
    return {"algorithm": algo, "env": env, "num_seeds": len(scores), "num_settings": 1,
            "final_return_per_seed": scores, "total_env_steps": 65536, **extra}  # fmt: skip


def _publish(folder: Path, algo: str, task: str, scores: list) -> Path:
    """A result as benchmarks/standard_tables.py publishes it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{algo}_{task}.json"
    published = {"benchmark": "standard_tables/test", "date": "2025-06-01",
                 "command": f"python train.py --config {algo}.yaml env={task}", "task": task,
                 "summary": _summary(algo, task, scores)}  # fmt: skip
    path.write_text(json.dumps(published))
    return path


def _run_folder(folder: Path, algo: str, env: str, scores: list, **extra) -> Path:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(_summary(algo, env, scores, **extra)))
    return folder


def _report(args: list, capsys) -> tuple[int, str, str]:
    """`rlax-trpo report ARGS`: (exit status, stdout, stderr)."""
    code = cli.main(["report", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------- statistics by hand


def _hand_probability(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y): per task, over every pair of seeds [x_i > y_j] + 0.5 [x_i == y_j]; averaged
    over tasks (columns)."""
    per_task = []
    for t in range(x.shape[1]):
        wins = [(a > b) + 0.5 * (a == b) for a in x[:, t] for b in y[:, t]]
        per_task.append(np.mean(wins))
    return float(np.mean(per_task))


@needs_rliable
def test_point_estimates_are_rliables_definitions(tmp_path):
    for (algo, task), scores in SCORES.items():
        _publish(tmp_path / "results", algo, task, scores)
    report = aggregate.build_report([tmp_path / "results"], reps=200, seed=0)
    for (algo, task), scores in SCORES.items():
        cell = report["per_task"][task][algo]
        assert cell["seeds"] == 5
        assert cell["iqm"] == pytest.approx(trim_mean(scores, 0.25))
        assert cell["mean"] == pytest.approx(np.mean(scores))
    # min-max normalised over every score of the task, both algorithms
    low = {t: min(SCORES["ppo", t] + SCORES["trpo", t]) for t in TASKS}
    high = {t: max(SCORES["ppo", t] + SCORES["trpo", t]) for t in TASKS}
    across = report["across_tasks"]
    assert across["tasks"] == TASKS
    for algo in ("ppo", "trpo"):
        norm = np.array(
            [[(s - low[t]) / (high[t] - low[t]) for s in SCORES[algo, t]] for t in TASKS]
        )
        got = across["metrics"][algo]
        assert got["IQM"]["value"] == pytest.approx(trim_mean(norm.ravel(), 0.25))
        assert got["mean"]["value"] == pytest.approx(norm.mean())
        assert got["median"]["value"] == pytest.approx(np.median(norm.mean(axis=1)))
        assert got["optimality gap"]["value"] == pytest.approx(1 - np.minimum(norm, 1).mean())
        for name, value in got.items():
            assert value["ci95"][0] <= value["value"] <= value["ci95"][1], (algo, name)
    matrix = {a: np.array([SCORES[a, t] for t in TASKS]).T for a in ("ppo", "trpo")}
    pairs = {(p["x"], p["y"]): p for p in report["probability_of_improvement"]}
    assert set(pairs) == {("ppo", "trpo"), ("trpo", "ppo")}
    for (x, y), p in pairs.items():
        assert p["probability"] == pytest.approx(_hand_probability(matrix[x], matrix[y]))
        assert p["ci95"][0] <= p["probability"] <= p["ci95"][1]
    assert pairs["ppo", "trpo"]["probability"] + pairs["trpo", "ppo"]["probability"] == (
        pytest.approx(1.0)
    )
    assert report["notes"] == [] and report["skipped"] == {}


def _exact_bootstrap(x: list[float], statistic) -> np.ndarray:
    """The statistic over every one of the n**n equally likely resamples of the seeds."""
    x = np.asarray(x)
    idx = np.array(list(itertools.product(range(len(x)), repeat=len(x))))
    return np.sort(statistic(x[idx], axis=1))


def _bands(exact: np.ndarray, reps: int) -> list[np.ndarray]:
    """Where each end of a 95% percentile interval from `reps` resamples falls, to 3 binomial
    standard errors (in probability): exact bootstrap quantiles at 2.5% and 97.5% -+ 3 SE."""
    slack = 3 * np.sqrt(0.025 * 0.975 / reps)
    return [np.quantile(exact, [q - slack, q + slack]) for q in (0.025, 0.975)]


def _within(interval, bands) -> bool:
    return all(lo - 1e-9 <= end <= hi + 1e-9 for end, (lo, hi) in zip(interval, bands, strict=True))


def _close(a, b, bands) -> bool:
    """Two estimates of the interval agree: each end apart by at most its band's width."""
    pairs = zip(a, b, bands, strict=True)
    return all(abs(x - y) <= hi - lo + 1e-9 for x, y, (lo, hi) in pairs)


@needs_rliable
@pytest.mark.parametrize(("cell", "key", "statistic"), [
    (("ppo", "Alpha"), "mean", np.mean),
    (("trpo", "Beta"), "mean", np.mean),
    (("ppo", "Beta"), "iqm", lambda a, axis: trim_mean(a, 0.25, axis=axis)),
])  # fmt: skip
def test_a_tasks_interval_is_a_95_percent_bootstrap_over_seeds(cell, key, statistic):
    scores, reps = SCORES[cell], 2000
    got = aggregate.per_task({cell: scores}, reps=reps, seed=0)[cell[1]][cell[0]][f"{key}_ci95"]
    exact = _exact_bootstrap(scores, statistic)  # over all 5**5 resamples
    bands = _bands(exact, reps)
    assert _within(got, bands), (got, bands)
    # an independent numpy percentile bootstrap: resample seeds with replacement
    rng = np.random.default_rng(12345)
    resamples = np.asarray(scores)[rng.integers(0, len(scores), size=(reps, len(scores)))]
    numpy_ci = np.percentile(statistic(resamples, axis=1), [2.5, 97.5])
    assert _within(numpy_ci, bands) and _close(got, numpy_ci, bands), (got, numpy_ci, bands)
    # the checks tell a 95% interval from the range or a 68% interval (the looser one only
    # for the mean: the IQM of 5 seeds takes too few values)
    for wrong in ([min(scores), max(scores)], np.quantile(exact, [0.16, 0.84])):
        assert not _within(wrong, bands), wrong
        assert key == "iqm" or not _close(wrong, numpy_ci, bands), wrong


@needs_rliable
def test_estimates_are_reproducible_and_leave_numpys_generator_alone():
    cells = {("ppo", "Alpha"): SCORES["ppo", "Alpha"]}
    np.random.seed(7)  # noqa: NPY002
    state = np.random.get_state()  # noqa: NPY002
    first = aggregate.per_task(cells, reps=200, seed=3)
    after = np.random.get_state()  # noqa: NPY002
    assert all(np.array_equal(a, b) for a, b in zip(state, after, strict=True))
    assert aggregate.per_task(cells, reps=200, seed=3) == first
    assert aggregate.per_task(cells, reps=200, seed=4) != first


# ------------------------------------------------------------- the command


def _tiny_inputs(tmp_path: Path) -> tuple[Path, Path, dict]:
    """2 algorithms x 2 tasks x 4 seeds published, one more run folder of ppo on TaskA (4
    seeds), and a JSON in the results folder that is not a published result."""
    scores = {
        ("ppo", "TaskA"): [10.0, 12.0, 14.0, 30.0],
        ("trpo", "TaskA"): [20.0, 22.0, 21.0, 19.0],
        ("ppo", "TaskB"): [0.5, 0.25, 0.75, 1.0],
        ("trpo", "TaskB"): [0.0, 0.125, 0.375, 0.25],
    }
    results = tmp_path / "results"
    for (algo, task), s in scores.items():
        _publish(results, algo, task, s)
    (results / "machine_2core.json").write_text(json.dumps({"benchmark": "x", "rows": []}))
    run = _run_folder(tmp_path / "runs" / "ppo_more", "ppo", "TaskA", [40.0, 11.0, 13.0, 15.0])
    return results, run, scores


@needs_rliable
def test_report_end_to_end(tmp_path, capsys):
    import matplotlib.pyplot as plt

    results, run, scores = _tiny_inputs(tmp_path)
    anchors = tmp_path / "anchors.yaml"
    anchors.write_text(
        "gymnax-blines PPO: {TaskA: 28, Other-MinAtar: 3}\nPureJaxRL: {TaskB: 0.6}\n"
    )
    out = tmp_path / "report"
    previous = plt.get_backend()
    plt.switch_backend("svg")  # the caller's backend, whatever it is, stays
    try:
        code, stdout, stderr = _report([results, run, "--out", out, "--reps", "200",
                                                  "--anchors", anchors], capsys)  # fmt: skip
        assert plt.get_backend().lower() == "svg" and plt.get_fignums() == []
    finally:
        plt.switch_backend(previous)
    assert code == 0, stderr
    names = {p.name for p in out.iterdir()}
    figures = {"per_task.png", "aggregate.png", "performance_profile.png",
               "probability_of_improvement.png"}  # fmt: skip
    assert names == {"report.md", "report.json"} | figures  # no temporary file left
    for name in figures:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    data = json.loads((out / "report.json").read_text())
    ppo_a = scores["ppo", "TaskA"] + [40.0, 11.0, 13.0, 15.0]  # the two inputs concatenated
    assert data["per_task"]["TaskA"]["ppo"]["seeds"] == 8
    assert data["per_task"]["TaskA"]["ppo"]["iqm"] == pytest.approx(trim_mean(ppo_a, 0.25))
    assert data["per_task"]["TaskB"]["trpo"]["mean"] == pytest.approx(0.1875)
    assert data["across_tasks"]["seeds_per_task"] == {"ppo": 4, "trpo": 4}
    row = {t: next(line for line in md.splitlines() if line.startswith(f"| {t} |"))
           for t in ("TaskA", "TaskB")}  # fmt: skip
    assert row["TaskA"].startswith(f"| TaskA | {trim_mean(ppo_a, 0.25):.4g} [")
    assert "| 8 |" in row["TaskA"] and "| 0.1875 [" in row["TaskB"]  # trpo's mean on TaskB
    # ppo's 8 seeds on TaskA have a confidence interval, its 4 on TaskB the range: each says so
    assert row["TaskA"].count("] 95% CI |") == 2 and "] range |" in row["TaskB"], row
    assert "ppo IQM [95% CI or range]" in md and "trpo IQM [range]" in md
    assert row["TaskA"].endswith("| 28 |  |")  # anchor columns: a number, or blank
    assert row["TaskB"].endswith("|  | 0.6 |")
    assert "gymnax-blines PPO" in md and "PureJaxRL" in md and "Other-MinAtar" in md
    for text in ("65,536", "python train.py --config ppo.yaml env=TaskA", "2025-06-01",
                 "concatenated (4 + 4 = 8)", "use the first 4"):  # fmt: skip
        assert text in md, text
    assert "machine_2core" not in md  # not a published result: ignored
    for figure in figures:
        assert f"]({figure})" in md
    assert "| ppo | trpo | " in md and "| trpo | ppo | " in md
    assert "(--range)" not in md and "min and max of its scores" in md
    assert row["TaskA"] in stdout and f"report: {out / 'report.md'}" in stdout


@needs_rliable
def test_range_sets_the_normalisation(tmp_path, capsys):
    results, _, scores = _tiny_inputs(tmp_path)
    out = tmp_path / "report"
    code, _, err = _report([results, "--out", out, "--reps", "200", "--range",
                                      "TaskA=0,100", "--range", "TaskB=0,2"], capsys)  # fmt: skip
    assert code == 0, err
    data = json.loads((out / "report.json").read_text())
    assert data["across_tasks"]["ranges"]["TaskA"] == {"low": 0, "high": 100, "from": "--range"}
    norm = [s / 100 for s in scores["ppo", "TaskA"]] + [s / 2 for s in scores["ppo", "TaskB"]]
    got = data["across_tasks"]["metrics"]["ppo"]["IQM"]["value"]
    assert got == pytest.approx(trim_mean(norm, 0.25))
    assert "TaskA: low 0, high 100 (--range)" in (out / "report.md").read_text()


@needs_rliable
def test_fewer_than_4_seeds_and_one_task(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", "ppo", "CartPole-v1", [500.0, 480.0, None, 20.0])
    out = tmp_path / "report"
    code, stdout, err = _report([run, "--out", out, "--reps", "200"], capsys)
    assert code == 0, err
    note = few_seeds_note(3)  # the seed with no finished episode is left out
    md = (out / "report.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| CartPole-v1 |"))
    assert note in row and note in stdout
    assert "finished no episode" in md
    assert {p.name for p in out.iterdir()} == {"report.md", "report.json", "per_task.png"}
    assert md.count("Skipped:") == 2  # across tasks (one task), improvement (one algorithm)
    # 4 seeds: no note
    more = _run_folder(tmp_path / "run4", "ppo", "CartPole-v1", [1.0, 2.0, 3.0, 4.0])
    code, stdout, _ = _report([more, "--out", tmp_path / "r4", "--reps", "50"], capsys)
    assert code == 0 and "too few" not in stdout


@needs_rliable
def test_score_reads_an_episode_figure_and_a_published_row_label(tmp_path, capsys):
    """`--score score_percent` takes each seed's final episode figure, not its return; a
    published result's own `algorithm` (standard_tables' ppo_rnn) names its row."""
    folder = tmp_path / "results"
    for algo, label, percents in (("ppo", None, [1.0, 2.0, 3.0, 4.0]),
                                  ("ppo", "ppo_rnn", [2.0, 4.0, 6.0, 8.0])):  # fmt: skip
        path = _publish(folder, label or algo, "Craft", [100.0 * p for p in percents])
        data = json.loads(path.read_text())
        data["summary"]["algorithm"] = algo  # both runs are PPO; the label tells them apart
        data["summary"]["final_episode_figures_per_seed"] = {
            "score_percent": percents,
            "achievements": [5.0, 6.0, 7.0, 8.0],
        }
        if label:
            data["algorithm"] = label
        path.write_text(json.dumps(data))
    report = aggregate.build_report([folder], reps=50, seed=0, score="score_percent")
    assert report["algorithms"] == ["ppo", "ppo_rnn"]
    assert report["per_task"]["Craft"]["ppo"]["mean"] == pytest.approx(2.5)
    assert report["per_task"]["Craft"]["ppo_rnn"]["iqm"] == pytest.approx(5.0)
    by_return = aggregate.build_report([folder], reps=50, seed=0)
    assert by_return["per_task"]["Craft"]["ppo"]["mean"] == pytest.approx(250.0)
    out = tmp_path / "report"
    code, _, err = _report([folder, "--score", "score_percent", "--out", out, "--reps", "50"],
                           capsys)  # fmt: skip
    assert code == 0, err
    assert "## Per task: final episode figure `score_percent`" in (out / "report.md").read_text()
    code, _, err = _report([folder, "--score", "nope", "--out", tmp_path / "r2"], capsys)
    assert code == 2 and "no episode figure 'nope' (it has: return, achievements, " in err


BAD = {
    "missing path": (["{tmp}/nowhere"], "nowhere: no such file or folder"),
    "no runs": (["{tmp}/empty"], "empty: no runs in it"),
    "range without numbers": (["{tmp}/results", "--range", "TaskA=1"], "--range: 'TaskA=1'"),
    "range LO >= HI": (["{tmp}/results", "--range", "TaskA=5,1"], "--range: 'TaskA=5,1'"),
    "range of no task": (["{tmp}/results", "--range", "Nope=0,1"], "--range: no task 'Nope'"),
    "anchors not YAML": (["{tmp}/results", "--anchors", "{tmp}/bad.yaml"], "not valid YAML"),
    "anchor not a number": (["{tmp}/results", "--anchors", "{tmp}/word.yaml"], "is not a number"),
    "anchors not a mapping": (["{tmp}/results", "--anchors", "{tmp}/list.yaml"], "must hold"),
    "a sweep": (["{tmp}/sweep"], "sweep/summary.json: a sweep of 2 settings"),
    "reps": (["{tmp}/results", "--reps", "0"], "--reps: must be a positive integer"),
    "score not logged": (
        ["{tmp}/results", "--score", "score_percent"],
        "no episode figure 'score_percent' (it has: return)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    _tiny_inputs(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "anchors.json").write_text('{"label": {"TaskA": 1}}')
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    (tmp_path / "word.yaml").write_text("label: {TaskA: abc}\n")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    _run_folder(tmp_path / "sweep", "ppo", "TaskA", [1.0, 2.0], num_settings=2)
    args, expected = BAD[case]
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path) for a in args] + ["--out", str(out)]
    code, stdout, err = _report(argv, capsys)
    assert code == 2
    assert len(err.splitlines()) == 1 and expected in err, err
    assert not out.exists() and stdout == ""


def test_without_rliable_one_line_and_status_2(tmp_path, capsys, monkeypatch):
    results, _, _ = _tiny_inputs(tmp_path)
    for name in ("rliable", "rliable.library", "rliable.metrics"):
        monkeypatch.setitem(sys.modules, name, None)  # `import rliable` fails
    out = tmp_path / "out"
    code, stdout, err = _report([results, "--out", out], capsys)
    assert code == 2 and stdout == ""
    assert err == 'rlax-trpo report: needs rliable: pip install "rlax_trpo[report]"\n'
    assert not out.exists()


@needs_rliable
def test_a_failure_while_drawing_leaves_no_file(tmp_path, capsys, monkeypatch):
    from rlax_trpo.report import render as aggregate_plots

    results, _, _ = _tiny_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("the earlier report\n")

    def broken(report, path):
        path.write_bytes(b"half a figure")
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(aggregate_plots, "_profile_figure", broken)
    with pytest.raises(RuntimeError, match="drawing failed"):
        cli.main(["report", str(results), "--out", str(out), "--reps", "20"])
    assert [p.name for p in out.iterdir()] == ["report.md"]
    assert (out / "report.md").read_text() == "the earlier report\n"
    fresh = tmp_path / "fresh"
    with pytest.raises(RuntimeError, match="drawing failed"):
        cli.main(["report", str(results), "--out", str(fresh), "--reps", "20"])
    assert not fresh.exists()


def test_the_report_modules_import_neither_jax_nor_rliable_nor_matplotlib():
    code = (
        "import sys, rlax_trpo.report.aggregate, rlax_trpo.report.render, rlax_trpo.cli\n"
        "print(sorted(m for m in ('jax', 'rliable', 'matplotlib') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_help_lists_report(capsys):
    assert cli.main(["--help"]) == 0
    assert any(line.startswith("  report ") for line in capsys.readouterr().out.splitlines())
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "--anchors" in capsys.readouterr().out


# ------------------------------------------------- every input gives a report or one line


def _sweep_folder(folder: Path, algo: str, env: str, finals: list[list[float | None]]) -> Path:
    """A sweep's run folder whose summary.json is written as a run writes it
    (`return_summary`): settings of hp.learning_rate, `finals[i]` the seeds of setting i."""
    from rlax_trpo.config.sweep import Sweep
    from rlax_trpo.report.run_files import return_summary, write_json

    rates = (1e-3, 1e-4, 3e-4, 1e-2)[: len(finals)]
    values = np.array(finals, np.float64).reshape(-1)
    seeds, its = len(finals[0]), 10
    done = np.isfinite(values)
    metrics = {
        "episode/return_sum": np.repeat(np.where(done, values, 0.0)[:, None], its, 1),
        "episode/count": np.repeat(done.astype(float)[:, None], its, 1),
    }
    summary = return_summary(
        metrics, np.ones((values.size, 2)), Sweep(("hp.learning_rate",), (rates,)), seeds
    )
    summary.update(
        algorithm=algo, env=env, num_seeds=seeds, num_settings=len(finals), total_env_steps=65536
    )
    folder.mkdir(parents=True)
    write_json(folder / "summary.json", summary)
    return folder


def _unfinished(folder: Path) -> Path:
    """A run folder that has not written its summary.json (yet)."""
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "config.yaml").write_text("algorithm: ppo\n")
    return folder


COMBINATIONS = {  # name -> run folders (algorithm, task, seeds' scores); every one reports
    "no shared task": [("ppo", "A", [1, 2, 3, 4]), ("trpo", "B", [5, 6, 7, 8])],
    "no shared task, one seed each": [("ppo", "A", [1]), ("trpo", "B", [2])],
    "one seed": [("ppo", "A", [3])],
    "two algorithms, one seed each": [("ppo", "A", [1]), ("trpo", "A", [2])],
    "one shared task of two": [
        ("ppo", "A", [1, 2]),
        ("trpo", "A", [3, 4, 5]),
        ("ppo", "B", [1, 2, 3, 4, 5]),
    ],
    "every score the same": [
        ("ppo", "A", [2, 2]),
        ("trpo", "A", [2, 2]),
        ("ppo", "B", [1, 1]),
        ("trpo", "B", [1, 1]),
    ],
    "one task, seeds unequal": [
        ("ppo", "A", [1, 2, 3, 4, 5]),
        ("ppo", "B", [1]),
        ("trpo", "A", [4]),
        ("trpo", "B", [1, 9]),
    ],
    "three algorithms, disjoint pairs": [
        ("ppo", "A", [1, 2]),
        ("trpo", "A", [2, 3]),
        ("vpg", "B", [1, 3]),
        ("ppo", "B", [0, 4]),
    ],
}


@needs_rliable
@pytest.mark.parametrize("case", sorted(COMBINATIONS))
def test_every_combination_of_runs_gives_a_report_that_says_what_it_skipped(tmp_path, capsys, case):
    """Runs that share no task (once `min() arg is an empty sequence`), one seed, flat
    scores, unequal seeds: a report (exit 0), whatever is skipped said in it."""
    runs = [
        _run_folder(tmp_path / f"r{i}", a, t, s) for i, (a, t, s) in enumerate(COMBINATIONS[case])
    ]
    out = tmp_path / "report"
    code, stdout, err = _report([*runs, "--out", out, "--reps", "20"], capsys)
    assert code == 0 and err == "", err
    data = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    for part in ("across_tasks", "probability_of_improvement"):
        assert (data[part] is None) == (part in data["skipped"]), part
        if data[part] is None:
            assert f"Skipped: {data['skipped'][part]}." in md
    for note in data["notes"]:
        assert f"- {note}" in md and f"note: {note}" in stdout
    if case.startswith("no shared task"):
        assert data["skipped"]["probability_of_improvement"].startswith("no task that every")
        assert "A: not run by every algorithm" in md and "B: not run by every algorithm" in md


@needs_rliable
def test_an_unfinished_run_is_skipped_with_a_note(tmp_path, capsys):
    """A run folder without summary.json (still running, or stopped), or whose summary.json
    a signal wrote (`status: interrupted`), is left out, one note line per run, printed and
    in report.md; with no finished run at all, one line."""
    runs = tmp_path / "runs"
    _run_folder(runs / "done", "ppo", "A", [1.0, 2.0, 3.0, 4.0])
    cut = _run_folder(runs / "cut", "ppo", "A", [9.0], status="interrupted", iterations_done=3,
                      num_iterations=8)  # fmt: skip
    stopped, going = _unfinished(runs / "stopped"), _unfinished(tmp_path / "going")
    (runs / "tensorboard").mkdir()  # not a run folder: nothing to say
    out = tmp_path / "report"
    code, stdout, err = _report([runs, going, "--out", out, "--reps", "20"], capsys)
    assert code == 0, err
    md = (out / "report.md").read_text()
    for run in (stopped, going):
        note = (
            f"{run}: skipped, an unfinished run (no summary.json: still running, or "
            f"stopped; `rlax-trpo train --resume {run}` finishes it)"
        )
        assert stdout.count(f"note: {note}\n") == 1 and md.count(f"- {note}\n") == 1, stdout
    note = f"{cut}: skipped, a run interrupted after iteration 3 of 8"
    assert stdout.count(f"note: {note}") == 1 and md.count(f"- {note}") == 1, stdout
    assert "tensorboard" not in stdout
    code, stdout, err = _report([going, "--out", tmp_path / "none"], capsys)
    assert code == 2 and stdout == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: no finished run to report: {going}: skipped, an unfinished")
    (going / "checkpoint" / "config.yaml").write_text("algorithm: ppo\n")  # as a run keeps it
    code, stdout, err = _report([going / "checkpoint", "--out", tmp_path / "none"], capsys)
    assert code == 2 and err == (
        f"error: {going / 'checkpoint'}: inside the run folder {going}; give the run folder\n"
    ), err


@needs_rliable
def test_a_sweep_reports_each_setting_or_the_one_chosen(tmp_path, capsys):
    """Each setting an algorithm of its own, named by its values (a setting with no finished
    episode left out, said); `--setting N` or `best` reports one under the algorithm's name."""
    sweep = _sweep_folder(
        tmp_path / "sweep", "ppo", "A", [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 9.0], [None] * 4]
    )
    file = sweep / "summary.json"
    out = tmp_path / "report"
    code, stdout, err = _report([sweep, "--out", out, "--reps", "20"], capsys)
    assert code == 0, err
    data = json.loads((out / "report.json").read_text())
    assert data["algorithms"] == ["ppo (learning_rate=0.0001)", "ppo (learning_rate=0.001)"]
    assert data["per_task"]["A"]["ppo (learning_rate=0.0001)"]["mean"] == pytest.approx(6.75)
    assert data["notes"][:2] == [
        f"{file}: a sweep of 3 settings, each reported as an algorithm of its own, "
        "`ppo (name=value)` (--setting N or best reports one)",
        f"{file}: setting 2 (learning_rate=0.0003) left out: no seed finished an episode",
    ]
    assert data["probability_of_improvement"] is not None  # two settings compared
    for chosen, index, mean in (("0", 0, 2.5), ("best", 1, 6.75)):
        out = tmp_path / f"report_{chosen}"
        code, stdout, err = _report(
            [sweep, "--setting", chosen, "--out", out, "--reps", "20"], capsys
        )
        assert code == 0, err
        data = json.loads((out / "report.json").read_text())
        assert data["algorithms"] == ["ppo"] and data["per_task"]["A"]["ppo"]["mean"] == mean
        how = (
            "the best, chosen by --setting best on the seeds it reports (chosen and measured "
            "on the same seeds, its score is biased upwards: confirm it on other seeds)"
            if chosen == "best"
            else "chosen by --setting"
        )
        rate = "0.0001" if index else "0.001"
        note = f"{file}: setting {index} of 3 (learning_rate={rate}), {how}"
        assert data["notes"] == [note] and f"note: {note}\n" in stdout
        assert data["settings"]["setting"] == (int(chosen) if chosen.isdigit() else chosen)
    for chosen, expected in (
        ("3", f"--setting 3: {file} is a sweep of 3 settings (0 to 2)"),
        ("2", f"{file}: setting 2: no seed finished an episode"),
        ("x", "--setting: 'x' is not a setting's index (0, 1, ...) or best"),
        ("-1", "--setting: '-1' is not a setting's index"),
    ):
        code, stdout, err = _report([sweep, "--setting", chosen, "--out", tmp_path / "no"], capsys)
        assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
        assert not (tmp_path / "no").exists()
    plain = _run_folder(tmp_path / "plain", "trpo", "A", [1.0, 2.0])
    code, stdout, _ = _report([plain, "--setting", "1", "--out", tmp_path / "p"], capsys)
    assert code == 0 and "note: --setting 1: no input is a sweep, so it chose nothing" in stdout


@needs_rliable
def test_the_per_task_figure_says_what_each_cell_shows(tmp_path):
    """A point with 5+ seeds is the IQM with its 95% CI; with 4 the IQM with the range (its
    bootstrap interval); with 2-3 the mean and the range (min to max, as the report's note
    says); with 1 the seed's value, no bar. The axis names the score in words."""
    from rlax_trpo.report import render

    runs = [
        _run_folder(tmp_path / "a", "ppo", "A", [4.0]),
        _run_folder(tmp_path / "b", "trpo", "A", [1.0, 2.0, 6.0]),
        _run_folder(tmp_path / "c", "ppo", "B", [1.0, 2.0, 3.0, 4.0, 5.0]),
        _run_folder(tmp_path / "d", "trpo", "B", [1.0, 2.0, 3.0, 8.0]),
    ]
    report = aggregate.build_report(runs, reps=50, seed=0)
    fig = render._per_task_figure(report, tmp_path / "per_task.png")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "IQM, 95% bootstrap CI (5+ seeds)",
        "IQM, range min to max (4 seeds)",
        "mean, range min to max (2-3 seeds)",
        "the value of its single seed",
    ]
    a, b = fig.axes[:2]
    assert a.get_ylabel() == "final episode return" and "IQM" not in a.get_ylabel()
    (trpo_bar,) = [c for c in a.collections if len(c.get_segments())]
    assert trpo_bar.get_segments()[0][:, 1].tolist() == [1.0, 6.0]  # the range, exactly
    points = {line.get_marker(): line.get_ydata().tolist() for line in a.lines}
    assert points["D"] == [4.0] and points["s"] == [3.0]  # ppo's one seed, trpo's mean
    assert "o" not in points and b.lines[0].get_marker() == "o"
    points = {line.get_marker(): line.get_ydata().tolist() for line in b.lines}
    assert points["^"] == [2.5]  # trpo's 4 seeds: their IQM (the mean would be 3.5)
    bars = [c.get_segments()[0][:, 1].tolist() for c in b.collections if len(c.get_segments())]
    assert [1.0, 8.0] in bars  # and the range, exactly
    one = aggregate.build_report([runs[0]], reps=50, seed=0)
    fig = render._per_task_figure(one, tmp_path / "one.png")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["the value of its single seed"]
    assert "one seed's value" in render.FIGURES["per_task.png"]


@needs_rliable
def test_the_per_task_figure_stays_readable_with_many_long_names(tmp_path):
    """Six settings' rows with long names: no two tick labels of an axis overlap."""
    from rlax_trpo.report import render

    runs = [
        _run_folder(
            tmp_path / f"r{i}",
            f"ppo (hp.learning_rate=0.00{i}, layer_norm=false)",
            "A",
            [1.0 + i, 2.0 + i],
        )  # fmt: skip
        for i in range(1, 7)
    ]
    report = aggregate.build_report(runs, reps=20, seed=0)
    fig = render._per_task_figure(report, tmp_path / "per_task.png")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert len(boxes) == 6
    overlaps = [(i, j) for i in range(6) for j in range(i + 1, 6) if boxes[i].overlaps(boxes[j])]
    assert not overlaps, overlaps
    assert all(b.y0 >= 0 for b in boxes)  # and none cut off at the bottom
    assert render.tick_labels(["ppo", "trpo"]) == (["ppo", "trpo"], 0)


@needs_rliable
def test_a_range_column_shows_the_range_beside_the_mean_too(tmp_path):
    # 4 seeds: the mean's bootstrap interval is narrower than the seeds' range; a column
    # called "range" shows the range beside both estimates
    from rlax_trpo.report import tables

    runs = [_run_folder(tmp_path / "a", "ppo", "A", [1.0, 2.0, 3.0, 10.0])]
    report = aggregate.build_report(runs, reps=200, seed=0)
    cell = report["per_task"]["A"]["ppo"]
    assert cell["interval"] == "range" and cell["mean_ci95"][0] > 1.0  # narrower
    text = tables.per_task_table(report, {})
    assert "| 4 [1, 10] |" in text and "ppo mean [range]" in text, text
