#!/usr/bin/env python
"""GRPO on a pretrained model in the Hugging Face layout, from the command line, on a CPU: held-out
greedy exact-match accuracy on word problems before and after GRPO, per seed.

    python benchmarks/lm_word_problems.py --out runs/lm_word_problems \\
        --json benchmarks/results/lm_word_problems_2core.json

1. `rlax-trpo tiny-lm --out OUT/tiny_lm --steps S`: a BPE tokenizer and a 1M-parameter
   Qwen2-layout decoder trained by S supervised steps on worked solutions, written as a
   Hugging Face folder (skipped with `--model FOLDER`);
2. for each seed, `rlax-trpo train --config grpo_tiny_word_problems model_path=OUT/tiny_lm
   --seed K` (LoRA), one process each, timed as a whole (its wall time, compilation and
   evaluations included), the accuracies from its summary.json: `initial_accuracy` is the
   supervised start, `final_accuracy` the policy after GRPO, both greedy on the same
   held-out problems;
3. full fine-tuning (`lora=null`) on the first seed (`--full-lr`, `--no-full` to skip).

The published seeds are 1000 and up: set aside, never used to choose a setting (the settings
were chosen on seeds 0-2). Extra `key=value` arguments override the GRPO config of every run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _publish import fresh_process_env, parse_with_overrides, publish

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=fresh_process_env({}), text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return time.perf_counter() - t0


def make_model(out: Path, steps: int, extra: list[str]) -> dict:
    folder = out / "tiny_lm"
    cmd = [sys.executable, "train.py", "tiny-lm", "--out", str(folder)]
    seconds = _run([*cmd, "--steps", str(steps), *extra])
    return {"folder": str(folder), "supervised_steps": steps, "seconds": round(seconds, 1)}


def grpo(out: Path, model: str, seed: int, name: str, overrides: list[str]) -> dict:
    run = out / name
    cmd = [
        sys.executable,
        "train.py",
        "--config",
        "grpo_tiny_word_problems",
        f"model_path={model}",
        "--seed",
        str(seed),
        "--out",
        str(run),
        "--no-progress",
        *overrides,
    ]
    seconds = _run(cmd)
    summary = json.loads((run / "summary.json").read_text())
    start, end = summary["initial_accuracy"], summary["final_accuracy"]
    return {
        "seed": seed,
        "overrides": overrides,
        "initial_accuracy": start,
        "final_accuracy": end,
        "gain": end - start,
        "wall_seconds_process": round(seconds, 1),
        "wall_seconds_run": round(summary["wall_seconds"], 1),
        "compile_seconds": round(summary["compile_seconds"], 1),
        "iterations": summary.get("iterations_done", summary.get("num_iterations")),
        "eval_size": summary["eval_size"],
        "command": " ".join(cmd[1:]),
    }


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --steps, --tiny-lm (the model to make or read) and --seeds (set aside)."""
    parser.add_argument("--model", help="an existing tiny-lm folder (skips making one)")
    parser.add_argument("--steps", type=int, default=1500, help="supervised steps of tiny-lm")
    parser.add_argument(
        "--tiny-lm",
        nargs=argparse.REMAINDER,
        default=[],
        dest="tiny",
        help="more tiny-lm options (last on the line)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001, 1002])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "lm_word_problems")
    add_model_arguments(parser)
    parser.add_argument("--full-lr", default="1e-4", help="full fine-tuning's learning rate")
    parser.add_argument("--no-full", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parse_with_overrides(parser, argv)  # key=value anywhere on the line
    overrides = args.overrides
    args.out.mkdir(parents=True, exist_ok=True)
    made = None
    if args.model is None:
        made = make_model(args.out, args.steps, args.tiny)
    model = args.model or made["folder"]
    made_file = Path(model) / "tiny_lm.json"
    if made_file.is_file():  # how `rlax-trpo tiny-lm` made it
        made = {**(made or {"folder": model}), "made": json.loads(made_file.read_text())}
    lora = [grpo(args.out, model, s, f"lora_seed_{s}", overrides) for s in args.seeds]
    full = None
    if not args.no_full:
        full_overrides = ["lora=null", f"hp.learning_rate={args.full_lr}", *overrides]
        full = grpo(args.out, model, args.seeds[0], f"full_seed_{args.seeds[0]}", full_overrides)
    for row in [*lora, *([full] if full else [])]:
        print(
            f"seed {row['seed']} {' '.join(row['overrides']) or 'LoRA'}: greedy accuracy "
            f"{row['initial_accuracy']:.3f} -> {row['final_accuracy']:.3f} "
            f"({row['gain']:+.3f}) in {row['wall_seconds_process']:.0f} s"
        )
    figures = {
        "what": "held-out greedy exact-match accuracy on word problems before and after GRPO "
        "(LoRA per seed, full fine-tuning on the first), a tiny Qwen2-layout model made here",
        "model": made or {"folder": model},
        "tiny_lm_command": "python train.py tiny-lm --out FOLDER --steps STEPS",
        "lora": lora,
        "full_fine_tuning": full,
        "min_gain_lora": min(r["gain"] for r in lora),
        "max_wall_seconds_lora": max(r["wall_seconds_process"] for r in lora),
    }
    publish("lm_word_problems", figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
