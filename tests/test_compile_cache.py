"""The persistent compilation cache (rlax_trpo/experiment/compile_cache.py): on by
default for the command and for `rlax_trpo.run` in a per-user folder, programs with the
progress bar's callback included; off with `--no-compile-cache` and RLAX_TRPO_COMPILE_CACHE=0;
a user's own JAX_COMPILATION_CACHE_DIR wins; a folder that cannot be written is one line.

conftest.py gives the whole suite a cache of its own through JAX_COMPILATION_CACHE_DIR: every
process here runs with an environment of its own, without it, and with XDG_CACHE_HOME in a
temporary folder (never the user's ~/.cache)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlax_trpo.experiment import compile_cache

ROOT = Path(__file__).resolve().parents[1]
TINY = ["num_envs=4", "num_steps=16", "total_env_steps=128", "eval_episodes=2", "hidden_sizes=[8]"]
# What would point a process at another cache, or turn it off.
CACHE_VARIABLES = (*compile_cache.CACHE_VARIABLES, "XDG_CACHE_HOME")
PYTHON_RUN = """
import sys
from rlax_trpo import Config, run
config = Config.create(num_envs=4, num_steps=16, total_env_steps=128, eval_episodes=2,
                       hidden_sizes=(8,))
run(config, out=sys.argv[1], progress=False)
"""


def _env(cache_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    return {**env, "XDG_CACHE_HOME": str(cache_home), "JAX_PLATFORMS": "cpu", **extra}


def _run(args: list[str], cache_home: Path, **extra: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(cache_home, **extra),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _entries(folder: Path) -> set[str]:
    """The cached programs under `folder` (jax's `<name>-<key>-cache` files)."""
    return {p.name for p in folder.rglob("*-cache")} if folder.exists() else set()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run from Python (`rlax_trpo.run`), its cache folder and the entries it wrote."""
    tmp = tmp_path_factory.mktemp("compile_cache")
    home = tmp / "xdg"
    _run(["-c", PYTHON_RUN, str(tmp / "run")], home)
    return tmp / "run", home, _entries(home / "rlax_trpo" / "jax")


def test_a_run_from_python_fills_the_per_user_cache(trained):
    _, home, entries = trained
    (folder,) = (home / "rlax_trpo" / "jax").iterdir()  # one folder per host CPU
    assert folder.name.startswith("cpu-")
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    # The training program holds the progress bar's callback, which jax 0.10 never caches.
    names = {name.split("-")[0] for name in entries}
    assert {"jit_run", "jit_init_population"} <= names, names


def test_the_command_reads_the_programs_back(trained, tmp_path):
    _, home, before = trained
    _run(["train.py", "--out", str(tmp_path / "again"), *TINY], home)
    # The same programs, none compiled again: every one was read from the cache (a program
    # compiled would have been written: there is no minimum compile time or size).
    assert _entries(home / "rlax_trpo" / "jax") == before


def test_another_budget_or_chunk_length_reads_the_programs_back(trained, tmp_path):
    """A call's iteration count and the annealing horizon (`anneal_lr` is on) are inputs of
    the one segment program: another `total_env_steps`, or `--chunk-iterations`, compiles
    none of the run's programs again (the host's small eager ones on arrays of the new
    length, e.g. the metrics' conversions, are another matter: milliseconds each)."""
    _, home, _ = trained
    shutil.copytree(home, tmp_path / "xdg")
    _run(["train.py", "--out", str(tmp_path / "first"), *TINY], tmp_path / "xdg")
    before = _entries(tmp_path / "xdg" / "rlax_trpo" / "jax")
    tiny = [x for x in TINY if not x.startswith("total_env_steps")]
    for i, more in enumerate(
        (["total_env_steps=320"], ["total_env_steps=256", "--chunk-iterations", "3"])
    ):
        _run(["train.py", "--out", str(tmp_path / f"run{i}"), *tiny, *more], tmp_path / "xdg")
    new = _entries(tmp_path / "xdg" / "rlax_trpo" / "jax") - before
    programs = ("jit_run-", "jit_init_population-", "jit_evaluate_population-")
    assert [name for name in new if name.startswith(programs)] == [], new


def test_eval_caches_by_default(trained, tmp_path):
    run, _, _ = trained
    _run(["train.py", "eval", "--run", str(run), "--episodes", "2"], tmp_path)
    assert _entries(tmp_path / "rlax_trpo" / "jax")


@pytest.mark.parametrize(
    "flag, variable", [(["--no-compile-cache"], {}), ([], {"RLAX_TRPO_COMPILE_CACHE": "0"})]
)
def test_off_with_the_flag_and_with_the_variable(trained, tmp_path, flag, variable):
    run, _, _ = trained
    _run(["train.py", "eval", "--run", str(run), "--episodes", "2", *flag], tmp_path, **variable)
    assert not (tmp_path / "rlax_trpo").exists()


def test_the_flag_turns_the_users_own_cache_off_too(trained, tmp_path):
    run, _, _ = trained
    own = tmp_path / "own"
    args = ["train.py", "eval", "--run", str(run), "--episodes", "2", "--no-compile-cache"]
    _run(args, tmp_path / "xdg", JAX_COMPILATION_CACHE_DIR=str(own))
    assert not _entries(own)


def test_a_users_own_cache_folder_wins(trained, tmp_path):
    """With the user's folder go the user's settings: jax's own minimum compile time (1 s)
    would keep a fast machine's eval programs out of it, so this user asks for every one."""
    run, _, _ = trained
    own = tmp_path / "own"
    args = ["train.py", "eval", "--run", str(run), "--episodes", "2"]
    user = {
        "JAX_COMPILATION_CACHE_DIR": str(own),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    _run(args, tmp_path / "xdg", **user)
    assert _entries(own) and not (tmp_path / "xdg" / "rlax_trpo").exists()


def test_an_unwritable_cache_folder_is_one_line(trained, tmp_path):
    run, _, _ = trained
    blocked = tmp_path / "rlax_trpo"  # a folder under a file cannot be made, even by root
    blocked.write_text("")
    proc = _run(["train.py", "eval", "--run", str(run), "--episodes", "2"], tmp_path)
    lines = [line for line in proc.stderr.splitlines() if "cache" in line.lower()]
    assert len(lines) == 1 and lines[0].startswith("note: compiling without a cache"), lines
    assert f"cannot write {blocked}: it is a file, not a folder;" in lines[0], lines
    assert "RLAX_TRPO_COMPILE_CACHE=0" in lines[0]
    assert "greedy" in proc.stdout  # evaluated all the same
