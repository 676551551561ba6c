"""Every script under benchmarks/ has a smoke command (`benchmarks/smoke.py`, run by CI)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _smoke():
    spec = importlib.util.spec_from_file_location("smoke", ROOT / "benchmarks/smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_script_has_a_smoke_command():
    smoke = _smoke()
    assert smoke.scripts() and set(smoke.scripts()) == set(smoke.SMOKE)
    for name, (command, _) in smoke.SMOKE.items():
        assert any(name in part for part in command), name  # the command runs that script


def test_ci_runs_the_smoke_runs_and_the_mutation_check():
    ci = (ROOT / ".ci/run").read_text()
    assert "python benchmarks/smoke.py" in ci and "python tests/mutants.py" in ci


def _throughput():
    spec = importlib.util.spec_from_file_location(
        "throughput", ROOT / "benchmarks" / "throughput.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec.loader.exec_module(module)
    return module


def test_throughput_sizes_iterations_from_the_width_and_keeps_a_configs_own_width():
    throughput = _throughput()
    # --iterations at a width far above the config's total: the total follows the width.
    args = throughput.parse_args(["--num-envs", "131072", "--iterations", "12"])
    (config,) = throughput.configs_of(args)
    assert config.num_envs == 131072 and config.num_iterations == 12
    # A config's own width is kept when no width is asked for (TRPO's RL Zoo 2 envs).
    args = throughput.parse_args(["--config", "trpo_cartpole", "--total-steps", "20480"])
    (config,) = throughput.configs_of(args)
    assert config.num_envs == 2 and config.total_env_steps == 20480
    # The default config with no size given: PureJaxRL's three widths.
    widths = [c.num_envs for c in throughput.configs_of(throughput.parse_args([]))]
    assert widths == [4, 64, 1024]


def test_overrides_are_read_anywhere_on_the_line():
    """`key=value` after a list option (`--num-envs 4 8`) is an override, not a width; a
    value of an option (`--config NAME`, `--json PATH`) is never taken for one."""
    throughput = _throughput()
    args = throughput.parse_args(
        ["--num-envs", "4", "8", "compute_dtype=bfloat16", "--seeds", "2", "num_steps=16",
         "--json", "a=b.json"]
    )  # fmt: skip
    assert (args.num_envs, args.seeds) == ([4, 8], [2])
    assert args.overrides == ["compute_dtype=bfloat16", "num_steps=16"]
    assert str(args.json) == "a=b.json"
    assert [c.compute_dtype for c in throughput.configs_of(args)] == ["bfloat16"] * 2
