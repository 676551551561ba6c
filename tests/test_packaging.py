"""What an installed user gets: the wheel's contents, the `rlax-trpo` command from any
directory, configs by name, and the files a project publishes (LICENSE, CITATION.cff).

The wheel is built here without installing it; `.ci/run` installs it into a fresh virtual
environment and runs `rlax-trpo train` and `rlax-trpo eval` from an empty directory.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from rlax_trpo.config import Config, load_config
from rlax_trpo.config.defaults import CONFIG_DIR, bundled_config_names

ROOT = Path(__file__).resolve().parents[1]
COMMAND = shutil.which("rlax-trpo", path=str(Path(sys.executable).parent))


def _build_requirements_installed() -> bool:
    """Whether every requirement of pyproject.toml's [build-system] is installed here."""
    import importlib.metadata

    from packaging.requirements import Requirement

    try:
        import tomllib  # Python 3.11+
    except ImportError:  # 3.10: build in the isolated environment, as without the backend
        return False
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for requirement in map(Requirement, requires):
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(version, prereleases=True):
            return False
    return True


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    # `build` is in the dev extra; an image with only the runtime dependencies (a GPU
    # machine's) has none: skipped there, with the reason.
    pytest.importorskip("build", reason="building the wheel needs `build` (the dev extra)")
    out = tmp_path_factory.mktemp("dist")
    # With the build backend installed, build with it (a machine without network builds too);
    # else in build's isolated environment, whose requirements come from the package index.
    offline = ["--no-isolation"] if _build_requirements_installed() else []
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", *offline, "--outdir", str(out), str(ROOT)],
        capture_output=True, text=True,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and not offline and "No matching distribution found" in text:
        pytest.skip("the isolated build could not fetch the build backend (no package index)")
    assert proc.returncode == 0, text[-3000:]
    (path,) = out.glob("rlax_trpo-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_ships_the_configs_the_command_and_the_license(wheel):
    names = set(wheel.namelist())
    configs = sorted(n.split("/")[-1].removesuffix(".yaml") for n in names if "/configs/" in n)
    assert configs == bundled_config_names() and len(configs) >= 15
    assert "rlax_trpo/cli/__init__.py" in names and not any(n.startswith("tests/") for n in names)
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    entry = wheel.read(f"{info}/entry_points.txt").decode()
    assert "rlax-trpo = rlax_trpo.cli:main" in entry
    assert any(n.startswith(f"{info}/licenses/LICENSE") for n in names)
    meta = wheel.read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta
    assert "Project-URL: Repository, https://github.com/" in meta


def test_bundled_configs_are_the_checkouts_configs_and_the_default():
    assert (ROOT / "configs").resolve() == CONFIG_DIR
    assert load_config("ppo_cartpole").to_dict() == Config.create().to_dict()


def test_the_command_finds_its_configs_from_an_empty_directory(tmp_path):
    # Training and evaluating with the installed command from an empty directory is .ci/run's
    # wheel check (a fresh virtual environment, the built wheel); here the console command of
    # this install lists the bundled configs and names a mistyped one in one line.
    assert COMMAND is not None, "the install did not create the rlax-trpo console command"

    def rlax_trpo(*args):
        return subprocess.run([COMMAND, *args], cwd=tmp_path, capture_output=True, text=True)

    listed = rlax_trpo("configs")
    assert listed.returncode == 0 and "trpo_cartpole" in listed.stdout
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["ppo_cartpole"][1:4] == ["ppo", "CartPole-v1", "200k"]  # algorithm, env, budget
    assert rows["trpo_minatar"][3:5] == ["10M", "steps"] and "TRPO on MinAtar" in listed.stdout
    assert rows["grpo_lm_sort"][3:5] == ["200", "iterations"]
    envs = rlax_trpo("configs", "--envs")
    assert envs.returncode == 0 and envs.stdout.startswith("gymnax (no prefix): CartPole-v1,")
    shown = rlax_trpo("configs", "--show", "trpo_cartpole")  # found by name, not as a file
    assert shown.returncode == 0 and "algorithm: trpo" in shown.stdout, shown.stderr[-2000:]
    unknown = rlax_trpo("train", "--config", "ppo_cartpol")
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "error: config 'ppo_cartpol': no bundled config of that name (did you mean "
        "ppo_cartpole? `rlax-trpo configs` lists the bundled ones)\n"
    )
    mistyped = rlax_trpo("trian")
    assert mistyped.returncode == 2 and mistyped.stderr.startswith("error: 'trian': no such co")


def test_license_citation_and_changelog():
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "Apache-2.0"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{citation["version"]}"' in pyproject
    assert f'Repository = "{citation["repository-code"]}"' in pyproject
    assert f"## {citation['version']}" in (ROOT / "CHANGELOG.md").read_text()
