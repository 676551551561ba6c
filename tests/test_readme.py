"""The README is a user's reference: its configuration tables are `Config` and the default
run, its command-line table is the parser, its links stay inside the repository, and it
tells no development history."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlax_trpo.cli import build_configs_parser, build_eval_parser, build_parser
from rlax_trpo.config import Config, ControlFields

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _table_rows(text: str) -> dict[str, list[str]]:
    """`| \\`key\\` | a | b | meaning |` rows -> {key: [a, b, meaning]}."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([a-z_.]+)` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in match.group(2).split(" | ")]
    return rows


def _value(cell: str):
    value = yaml.safe_load(cell)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, rel=1e-6)
    return a == b


def _flat(config: dict) -> dict:
    flat = {k: v for k, v in config.items() if k != "hp"}
    flat.update({f"hp.{k}": v for k, v in config.get("hp", {}).items()})
    return flat


def _config_tables() -> tuple[dict, list[str], dict, dict]:
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    tables = [block for block in section.split("\n\n") if block.startswith("| key |")]
    assert len(tables) == 3, "shared fields, per-algorithm fields, language-model fields"
    header = [c.strip() for c in tables[1].splitlines()[0].strip("|").split("|")][1:-1]
    return _table_rows(tables[0]), header, _table_rows(tables[1]), _table_rows(tables[2])


def test_configuration_tables_are_each_algorithms_fields_and_defaults():
    shared, algorithms, per_algorithm, lm = _config_tables()
    defaults = Config.create().to_dict()  # plain YAML values
    defaults = {k: v for k, v in defaults.items() if k in ControlFields.model_fields}
    assert sorted(shared) == sorted(defaults), "every shared field, and nothing else"
    for key, (cell, meaning) in shared.items():
        assert _same(_value(cell), defaults[key]) and meaning, (key, cell, defaults[key])
    assert algorithms == ["ppo", "trpo", "npg", "vpg", "grpo"]
    for i, algorithm in enumerate(algorithms):
        own = {k: v for k, v in _flat(Config.create(algorithm=algorithm).to_dict()).items()
               if k not in defaults}  # fmt: skip
        column = {k: cells[i] for k, cells in per_algorithm.items() if cells[i] != "—"}
        assert sorted(column) == sorted(own), (algorithm, "what it reads, and nothing else")
        for key, cell in column.items():
            assert _same(_value(cell), own[key]), (algorithm, key, cell, own[key])
    assert all(cells[-1] for cells in per_algorithm.values()), "every row says what it means"
    lm_defaults = _flat(Config.create(algorithm="grpo_lm").to_dict())
    lm_defaults = {k: v for k, v in lm_defaults.items() if k not in ("algorithm", "imports")}
    assert sorted(lm) == sorted(lm_defaults)
    for key, (cell,) in lm.items():
        assert _same(_value(cell), lm_defaults[key]), (key, cell, lm_defaults[key])


def test_the_table_check_notices_a_wrong_default():
    wrong = "| `num_envs` | 4 | parallel environments |"
    ((cell, _),) = _table_rows(wrong).values()
    assert not _same(_value(cell), Config.create().num_envs)
    wrong = "| `hp.gamma` | 0.99 | 0.99 | 0.99 | 0.99 | 0.99 | discount |"
    ((ppo, *_),) = _table_rows(wrong).values()
    assert not _same(_value(ppo), float(Config.create().hp.gamma))


def test_every_command_line_option_is_documented():
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    for parser in (build_parser(), build_eval_parser(), build_configs_parser()):
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in section or f" {flag}" in section, flag


def test_links_stay_in_the_repository():
    for target in re.findall(r"\]\(([^)]+)\)", README):
        if target.startswith("#"):
            anchor = target[1:]
            headings = [h.lower().replace(" ", "-") for h in re.findall(r"^#+ (.+)$", README, re.M)]
            assert anchor in headings, target
            continue
        assert "://" not in target, target
        assert (ROOT / target).exists(), target


def test_install_url_is_pyprojects():
    url = re.search(r'^Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    installs = re.findall(r"git\+(https://\S+?)\"", README)
    assert installs and set(installs) == {url}


@pytest.mark.parametrize(
    "pattern",
    [r"\.\./shared", r"REFERENCES\.md", r"(?i)work period", r"(?i)\bsession\b", r"(?i)issue",
     r"(?i)an earlier run", r"(?i)then in use", r"(?i)\bTODO\b"],
)  # fmt: skip
def test_no_development_history(pattern):
    assert not re.search(pattern, README), pattern


TEST_COMMAND = "python -m pytest -q -n auto --maxprocesses 4 --dist loadfile"


def test_the_two_commands():
    assert 'pip install -e ".[dev]" && python train.py\n' in README
    assert f'pip install -e ".[dev]" && {TEST_COMMAND}\n' in README
    assert TEST_COMMAND in (ROOT / ".ci/run").read_text().splitlines()  # CI runs it as given


def _python_block(heading: str) -> str:
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_the_load_policy_snippet_runs_as_printed(tmp_path, monkeypatch, capsys):
    import train

    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "ppo_cartpole", "--seeds", "2", "--out", "runs/ppo8", "--no-progress",
            "num_envs=4", "num_steps=16", "total_env_steps=128", "num_minibatches=1",
            "eval_episodes=2"]  # fmt: skip
    assert train.main(tiny) == 0
    code = _python_block("A trained policy in Python")
    assert 'load_policy("runs/ppo8"' in code and "env.step" in code
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert "greedy episode return" in capsys.readouterr().out
    assert 1 <= scope["episode_return"] <= 500  # CartPole: one reward per step
    assert scope["returns"].shape == (100,)
    summary = json.loads((tmp_path / "runs/ppo8/summary.json").read_text())
    assert scope["policy"].evaluate().mean() == pytest.approx(summary["eval_return_per_seed"][0])
