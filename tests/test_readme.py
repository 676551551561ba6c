"""The README and the docs are a user's reference: the configuration tables
(docs/configuration.md) are `Config` and the default run, the command-line tables
(docs/command_line.md) are the parsers, the README is a front page of at most 200 lines, the
docs index names every page, links stay inside the repository, and no page tells development
history. tests/test_readme_snippets.py runs the README's Python blocks as printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlax_trpo.cli import build_configs_parser, build_eval_parser, build_parser
from rlax_trpo.cli.parsers import build_tiny_lm_parser
from rlax_trpo.config import Config, ControlFields

try:  # `rlax-trpo report`'s parser lives beside the report code
    from rlax_trpo.report.command import build_report_parser
except ImportError:
    from rlax_trpo.cli import build_report_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
CONFIGURATION = (DOCS / "configuration.md").read_text()
COMMAND_LINE = (DOCS / "command_line.md").read_text()
# The README and every page under docs/, by path relative to the repository.
PAGES = {
    "README.md": README,
    **{str(p.relative_to(ROOT)): p.read_text() for p in sorted(DOCS.rglob("*.md"))},
}


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
    tables = [block for block in CONFIGURATION.split("\n\n") if block.startswith("| key |")]
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
    parsers = (
        build_parser(),
        build_eval_parser(),
        build_configs_parser(),
        build_report_parser(),
        build_tiny_lm_parser(),
    )
    for parser in parsers:
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in COMMAND_LINE or f" {flag}" in COMMAND_LINE, flag


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", sorted(PAGES))
def test_links_stay_in_the_repository(page):
    folder = (ROOT / page).parent
    for target in re.findall(r"\]\(([^)]+)\)", PAGES[page]):
        assert "://" not in target, (page, target)
        path, _, anchor = target.partition("#")
        file = (folder / path).resolve() if path else ROOT / page
        assert file.exists(), (page, target)
        assert file.is_relative_to(ROOT), (page, target)
        if anchor:
            assert anchor in _anchors(file.read_text()), (page, target)


def test_the_link_check_notices_a_missing_anchor():
    assert _anchor("Cheap resets (`reset_ratio`)") == "cheap-resets-reset_ratio"
    assert _anchor("Chunked, resumable runs") in _anchors(PAGES["docs/operations.md"])
    assert "no-such-heading" not in _anchors(PAGES["docs/operations.md"])


def test_the_readme_is_a_front_page():
    assert len(README.splitlines()) <= 200
    assert "](docs/README.md)" in README, "the README links the docs index"


def test_the_guides_are_guides_and_the_studies_hold_the_lab():
    # the user docs stay short enough to read; experiment records go to studies/
    pages = {p.name: len(p.read_text().splitlines()) for p in DOCS.glob("*.md")}
    assert sum(pages.values()) <= 2500, pages
    assert pages["results.md"] <= 200
    studies = sorted((ROOT / "studies").glob("*/README.md"))
    assert studies, "studies/<question>/README.md"
    index = (ROOT / "studies" / "README.md").read_text()
    for study in studies:
        assert f"{study.parent.name}/README.md" in index, f"studies/README.md: {study.parent.name}"


def test_the_docs_index_names_every_page():
    index = PAGES["docs/README.md"]
    linked = {(DOCS / target.partition("#")[0]).resolve()
              for target in re.findall(r"\]\(([^)]+)\)", index)}  # fmt: skip
    for page in DOCS.glob("*.md"):
        assert page.name == "README.md" or page.resolve() in linked, page.name
    for page in (DOCS / "upstream").glob("*.md"):
        assert page.resolve() in linked, page.name


def test_install_url_is_pyprojects():
    url = re.search(r'^Repository = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
    assert re.findall(r"git\+(https://\S+?)\"", README), "the README says how to install"
    for page, text in PAGES.items():
        assert set(re.findall(r"git\+(https://\S+?)\"", text)) <= {url}, page


@pytest.mark.parametrize(
    "pattern",
    [r"\.\./shared", r"REFERENCES\.md", r"(?i)work period", r"(?i)\bsession\b", r"(?i)issue",
     r"(?i)an earlier run", r"(?i)then in use", r"(?i)\bTODO\b"],
)  # fmt: skip
def test_no_development_history(pattern):
    for page, text in PAGES.items():
        assert not re.search(pattern, text), (page, pattern)


TEST_COMMAND = "python -m pytest -q -n auto --maxprocesses 4 --dist loadfile"


def test_the_two_commands():
    assert "pip install -e . && python train.py\n" in README  # the main job installs light
    assert f'pip install -e ".[dev]" && {TEST_COMMAND}\n' in README
    assert TEST_COMMAND in (ROOT / ".ci/run").read_text().splitlines()  # CI runs it as given


def test_the_install_time_is_its_file():
    # "the install takes N s in a new virtual environment ..., G GiB ...": the JSON's figures
    data = json.loads((ROOT / "benchmarks/results/first_install_2core.json").read_text())
    sentence = " ".join(README.split("the install takes", 1)[1].split(":\n", 1)[0].split())
    found = re.match(r"(\d+) s in a new virtual environment .*?, ([\d.]+) GiB and no", sentence)
    assert found, sentence
    assert int(found[1]) == round(data["install"]["seconds"]), sentence
    assert float(found[2]) == round(data["install"]["venv_gib"], 2), sentence
    assert data["install"]["suites_installed"] == [] and data["date"] in sentence


def test_the_suites_size_and_time_are_its_files():
    # "N tests in A to B min ... on <date>, ... `benchmarks/results/ci_time_2core/`": the test
    # count and the fastest and slowest wall times of that date's suite files.
    sentence = " ".join(README.split("Run the tests (", 1)[1].split("):", 1)[0].split())
    found = re.search(r"([\d,]+) tests in (\d+) to (\d+) min .*?(\d{4}-\d\d-\d\d)", sentence)
    assert found, sentence
    runs = [
        json.loads(p.read_text())
        for p in (ROOT / "benchmarks/results/ci_time_2core").glob("*.json")
    ]
    runs = [r for r in runs if r.get("date") == found[4] and "suite_wall_s" in r]
    walls = sorted(r["suite_wall_s"] / 60 for r in runs)
    assert len(runs) >= 2 and (int(found[2]), int(found[3])) == (round(walls[0]), round(walls[-1]))
    assert int(found[1].replace(",", "")) == max(r["suite_tests"] for r in runs)


def _python_block(heading: str) -> str:
    section = README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S)[1]


def test_the_load_policy_snippet_runs_as_printed(tmp_path, monkeypatch, capsys):
    import train

    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "ppo_cartpole", "--seeds", "2", "--out", "runs/ppo4", "--no-progress",
            "num_envs=4", "num_steps=16", "total_env_steps=128", "num_minibatches=1",
            "eval_episodes=2"]  # fmt: skip
    assert train.main(tiny) == 0
    code = _python_block("A trained policy in Python")
    assert 'load_policy("runs/ppo4"' in code and "env.step" in code
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert "greedy episode return" in capsys.readouterr().out
    assert 1 <= scope["episode_return"] <= 500  # CartPole: one reward per step
    assert scope["returns"].shape == (100,)
    summary = json.loads((tmp_path / "runs/ppo4/summary.json").read_text())
    assert scope["policy"].evaluate().mean() == pytest.approx(summary["eval_return_per_seed"][0])
