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


def test_every_mutant_text_occurs_once_and_its_tests_exist():
    """Caught here, in seconds, what would otherwise stop CI's mutation check after the suite."""
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tests/mutants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for m in module.MUTANTS:
        assert (ROOT / m.file).read_text().count(m.old) == 1, m.name
        files = [t.split("::")[0] for t in m.tests if t.startswith("tests/")]
        assert files and all((ROOT / f).is_file() for f in files), m.name


def _benchmark(name: str):
    """The script `benchmarks/<name>.py` as a module (its folder on the path, for its imports)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec.loader.exec_module(module)
    return module


def _throughput():
    return _benchmark("throughput")


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


def _profile_ppo():
    return _benchmark("profile_ppo")


HLO = """HloModule m

%cond (p: (s32[])) -> pred[] {
  %c = pred[] fusion(%p), kind=kLoop, calls=%fc
}

%body (p: (s32[])) -> (s32[]) {
  %a = f32[4]{0} copy(%x)
  %b = f32[4]{0} fusion(%a), kind=kLoop, calls=%fb
  %d = f32[4,4]{1,0} dot(%b, %b)
}

%callee (p: (s32[])) -> (s32[]) {
  %e = f32[4]{0} fusion(%p), kind=kLoop, calls=%fe
  %w = (s32[]) while(%p), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
}

ENTRY %main (k: u32[2]) -> f32[] {
  %f = f32[] fusion(%k), kind=kLoop, calls=%ff
  %w = (s32[]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  %g = (s32[]) call(%t), to_apply=%callee, frontend_attributes={x="y"}
}
"""


def test_kernel_launches_count_loop_bodies_times_their_trips():
    profile = _profile_ppo()
    # entry 1 + 5 x (cond 1 + body 3) + call (1 + 3 x (1 + 3)) = 1 + 20 + 13
    assert profile.kernel_launches(HLO) == 34
    assert profile.kernel_launches(HLO.replace('{"n":"5"}', '{"n":"6"}')) == 38
    unknown = HLO.replace(', backend_config={"known_trip_count":{"n":"3"}}', "")
    assert profile.kernel_launches(unknown) is None


def test_kernel_launches_of_a_compiled_scan_grow_with_its_length():
    import jax
    import jax.numpy as jnp

    profile = _profile_ppo()

    def launches(length):
        def f(x):
            step = lambda c, _: (jnp.tanh(c @ c) + c, c.sum())
            return jax.lax.scan(step, x, None, length=length)

        return profile.kernel_launches(jax.jit(f).lower(jnp.ones((8, 8))).compile().as_text())

    short, long, longer = launches(10), launches(20), launches(30)
    assert long - short == longer - long > 0  # the body's launches, times 10 more trips


def test_the_word_problem_table_of_lm_results_is_the_benchmarks_json():
    """docs/lm_results.md's GRPO-on-a-CPU table (and its row in docs/results.md) is
    benchmarks/results/lm_word_problems_2core.json (benchmarks/lm_word_problems.py writes it),
    row for row, with its date, jax and command."""
    import json

    result = json.loads((ROOT / "benchmarks/results/lm_word_problems_2core.json").read_text())
    doc = (ROOT / "docs/lm_results.md").read_text()
    rows = [("LoRA", r) for r in result["lora"]] + [
        ("full fine-tuning", result["full_fine_tuning"])
    ]
    for kind, r in rows:
        line = (
            f"| {kind} | {r['seed']} | {r['initial_accuracy']:.3f} | {r['final_accuracy']:.3f} "
            f"| {r['gain']:+.3f} | {r['wall_seconds_process'] / 60:.1f} min |"
        )
        assert line in doc, line
        assert r["iterations"] == 300 and r["eval_size"] == 500 and r["seed"] >= 1000
    assert f"({result['date']}, " in doc and f"jax {result['jax']})" in doc
    assert result["command"].removeprefix("python ").split()[0] in doc
    lora_gains = sorted(r["gain"] for r in result["lora"])
    assert f"by {lora_gains[0]:.2f} to {lora_gains[-1]:.2f} with LoRA" in doc
    made = result["model"]["made"]  # the model's own record, tiny_lm.json
    assert f"{made['supervised_steps']:,} supervised steps (in {made['seconds']:.0f} s)" in doc
    ends = " / ".join(f"{r['final_accuracy']:.3f}" for r in result["lora"])
    start = result["lora"][0]["initial_accuracy"]
    assert f"accuracy {start:.3f} -> {ends} |" in (ROOT / "docs/results.md").read_text()
    guide = (ROOT / "docs/lm.md").read_text()
    assert f"# {made['seconds'] / 60:.0f} minutes on 2 cores" in guide


def test_committed_results_name_no_absolute_path_of_the_machine_that_made_them():
    """Results and logs name paths relative to the checkout, or by a variable ($TMP, $VENV),
    never the directories of the machine that wrote them."""
    import re

    machine_path = re.compile(r"(^|[^\w.$~])/(tmp|home|work|root|check|opt|Users)/")
    found = []
    for folder in (ROOT / "benchmarks" / "results",):
        for path in sorted(folder.rglob("*")):
            if not path.is_file():
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if machine_path.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found[:20])


def test_the_readmes_sb3_contrib_figures_are_its_json():
    import json

    data = json.loads((ROOT / "benchmarks/results/trpo_vs_sb3_2core.json").read_text())
    ours, many, sb3 = data["ours_1_seed"], data["ours_8_seeds"], data["sb3_contrib"]
    per_step = sb3["wall_seconds"] / sb3["env_steps"]  # sb3 on our number of steps
    whole_1 = (
        per_step * ours["env_steps_per_seed"] / (ours["wall_seconds"] + ours["compile_seconds"])
    )
    whole_8 = (
        per_step * many["env_steps_per_seed"] * 8 / (many["wall_seconds"] + many["compile_seconds"])
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = (
        f"TRPO trains CartPole {whole_1:.1f}x faster than sb3-contrib's with one seed counting "
        f"compilation ({ours['wall_seconds'] + ours['compile_seconds']:.1f} s against "
        f"{sb3['wall_seconds']:.1f} s; {data['speedup_1_seed']:.1f}x after it) and "
        f"{whole_8:.1f}x with 8 seeds ({data['speedup_8_seeds']:.1f}x after it;"
    )
    assert said in readme, said
