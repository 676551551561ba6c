"""A pretrained model's GRPO run from the command line: a Hugging Face folder (made here by
`rlax-trpo tiny-lm`) with LoRA or with every parameter, the run folder, evaluation, a kill -9
and `--resume`, the state's tree (Adam on the adapters only, one copy of the weights), the
weights split over 2 and 4 devices, and every bad input as one line with exit status 2."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import conftest
import jax
import numpy as np
import pytest

import train
from rlax_trpo.config import load_config

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A small random model in the Hugging Face layout, with its own BPE tokenizer, made by
    `rlax-trpo tiny-lm`."""
    out = tmp_path_factory.mktemp("tiny") / "model"
    from rlax_trpo.cli import main

    argv = ["tiny-lm", "--out", str(out), "--steps", "0", "--width", "32", "--layers", "2"]
    assert main([*argv, "--vocab-size", "300"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tiny_lm.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    return out


def _tiny(folder: Path, *extra: str) -> list[str]:
    return [
        "--config",
        "grpo_tiny_word_problems",
        f"model_path={folder}",
        "num_problems=400",
        "num_prompts=4",
        "group_size=4",
        "num_iterations=4",
        "eval_every=2",
        "eval_size=16",
        "max_new_tokens=12",
        "--no-progress",
        *extra,
    ]


def test_a_lora_run_writes_its_folder_and_evaluates(folder, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main([*_tiny(folder, "--seeds", "2"), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithm"] == "grpo_lm" and summary["num_seeds"] == 2
    assert summary["model_path"] == str(folder) and summary["task"] == "word_problems"
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == 2 * 4 and all(np.isfinite(float(r["loss/total"])) for r in rows)
    assert float(rows[0]["grpo/ratio_first"]) == pytest.approx(1.0, abs=1e-4)
    capsys.readouterr()
    exported = tmp_path / "exported"
    assert train.main(["eval", "--run", str(out), "--member", "1", "--export", str(exported)]) == 0
    printed = capsys.readouterr().out
    assert "held-out accuracy\n  greedy: " in printed and str(exported) in printed
    # the exported folder is a checkpoint: it loads, LoRA merged, with the member's policy
    from rlax_trpo.experiment.saved import SavedRun
    from rlax_trpo.lm.hf import DecoderLM, load_pretrained
    from rlax_trpo.lm.policy import combine
    from rlax_trpo.lm.pretrained_program import load_model

    loaded = load_pretrained(exported)
    assert loaded.tokenizer.eos_ids == load_pretrained(folder).tokenizer.eos_ids
    saved = SavedRun(out)
    member = jax.tree.map(lambda x: np.asarray(x)[1], saved.state.grpo.params)
    model = load_model(saved.config)
    ids = np.arange(12)[None] % loaded.config.vocab_size
    ours, _ = DecoderLM(model.config).apply(combine(model.params, member), ids)
    theirs, _ = DecoderLM(loaded.config).apply(loaded.params, ids)
    np.testing.assert_allclose(theirs, ours, atol=1e-4)
    assert train.main(["eval", "--run", str(out), "--export", str(exported)]) == 2


def test_lora_trains_only_its_adapters_and_holds_one_copy_of_the_weights(folder):
    from flax.traverse_util import flatten_dict

    from rlax_trpo.experiment.plan import unplaced
    from rlax_trpo.experiment.population import population_initializer
    from rlax_trpo.lm.program import make_lm_program

    cfg = load_config("grpo_tiny_word_problems", [*_tiny(folder)[2:-1], "lora={rank: 2}"])
    program = make_lm_program(cfg)
    keys = jax.eval_shape(lambda: jax.random.key_data(jax.random.split(jax.random.key(0), 3)))
    hps = jax.tree.map(lambda x: jax.ShapeDtypeStruct((3,), np.float32), program.hparams)
    state = jax.eval_shape(population_initializer(program), keys, hps, unplaced(program.shared))
    weights = flatten_dict(program.shared.weights)
    for part in (state.grpo.params, state.grpo.ref_params):
        paths = set(flatten_dict(part))
        assert paths and all(p[-1] in ("lora_a", "lora_b") for p in paths), paths
    adam = [
        s
        for s in jax.tree.leaves(state.grpo.opt_state, is_leaf=lambda x: hasattr(x, "mu"))
        if hasattr(s, "mu")
    ]
    assert len(adam) == 1
    for moments in (adam[0].mu, adam[0].nu):
        assert set(flatten_dict(moments)) == set(flatten_dict(state.grpo.params))
    # the weights are not in the members' state: all of it (adapters, their reference copy,
    # Adam's two moments, ...) is well under one copy of the model
    member = sum(np.prod(x.shape[1:]) for x in jax.tree.leaves(state))
    assert member < 0.5 * sum(np.size(w) for w in weights.values())  # one copy would be 1.0


def test_full_fine_tuning_trains_every_parameter(folder, tmp_path):
    out = tmp_path / "full"
    argv = _tiny(folder, "lora=null", "hp.learning_rate=1e-4", "--out", str(out))
    assert train.main(argv) == 0
    from rlax_trpo.experiment.saved import SavedRun

    saved = SavedRun(out)
    leaves = jax.tree.leaves(saved.state.grpo.params)
    weights = jax.tree.leaves(saved.program.shared.weights)
    assert len(leaves) == len(weights)
    assert any(np.abs(np.asarray(a)[0] - b).max() > 0 for a, b in zip(leaves, weights, strict=True))


KILL_AFTER_FIRST_CHECKPOINT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, os.environ["ROOT"])
    from rlax_trpo.experiment import chunks
    original, calls = chunks._chunk_metrics, [0]

    def killing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:  # after the first checkpoint, in the middle of the run
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    chunks._chunk_metrics = killing
    import train
    sys.exit(train.main(sys.argv[1:]))
""")


def test_kill_9_in_the_middle_and_resume_give_the_same_metrics(folder, tmp_path):
    argv = _tiny(folder, "num_iterations=6", "--chunk-iterations", "2")
    whole = tmp_path / "whole"
    assert train.main([*argv, "--out", str(whole)]) == 0
    killed = tmp_path / "killed"
    env = {**os.environ, "ROOT": str(ROOT), **conftest.SAME_BACKEND}
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_FIRST_CHECKPOINT, *argv, "--out", str(killed)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert (killed / "checkpoint").is_dir() and not (killed / "summary.json").exists()
    assert train.main(["--resume", str(killed), "--no-progress"]) == 0
    assert (killed / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()


SHARDED = textwrap.dedent("""
    import sys

    import jax

    assert jax.device_count() == 4, jax.devices()  # before a run fixes one device
    import train
    argv, out = sys.argv[2:], sys.argv[1]
    for devices in (1, 2, 4):
        where = ["--shard", "model", "--devices", str(devices), "--out", f"{out}/d{devices}"]
        assert train.main([*argv, *where]) == 0
    # the weights are split: each of 4 devices holds a quarter of the embedding
    from rlax_trpo.config import load_config
    from rlax_trpo.experiment import parallel
    from rlax_trpo.lm.program import make_lm_program

    overrides = [a for a in argv if "=" in a and not a.startswith("--")]
    program = make_lm_program(load_config("grpo_tiny_word_problems", overrides))
    placed = parallel.put_shared(program.shared, parallel.make_mesh(4, "model"))
    table = placed.weights["params"]["embed_tokens"]["embedding"]
    quarter = (table.shape[0] // 4, table.shape[1])
    assert {s.data.shape for s in table.addressable_shards} == {quarter}
""")


def test_weights_split_over_2_and_4_devices_give_the_single_device_losses(folder, tmp_path):
    argv = _tiny(folder, "lora=null", "hp.learning_rate=3e-4")
    conftest.run_on_devices(SHARDED, tmp_path, *argv, devices=4)
    rows = {d: list(csv.DictReader((tmp_path / f"d{d}" / "metrics.csv").open())) for d in (1, 2, 4)}
    for d in (2, 4):
        assert json.loads((tmp_path / f"d{d}" / "summary.json").read_text())["num_devices"] == d
        for a, b in zip(rows[d], rows[1], strict=True):
            for key in ("loss/total", "loss/grad_norm", "policy/kl_ref", "reward/mean"):
                assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-3, abs=1e-5), (d, key)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model_path=/nonexistent/model", "model_path: /nonexistent/model is not a folder"),
        ("task=max_digit", "model_path: needs one of"),
        ("rewards={exact: 1.0, lenght: 0.1}", "'lenght' is not a reward"),
        ("lora={rank: 4, targets: [qkv]}", "lora.targets"),
        ("eval_size=100000", "eval_size: 100000 held-out problems asked for"),
        ("max_new_tokens=5000", "exceed the model's 512 positions"),
        ("data_path=rows.jsonl", "data_path: needed by task jsonl"),
        ("model={num_layers: 3}", "model: read only with a tiny model"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    folder, tmp_path, capsys, override, message
):
    out = tmp_path / "run"
    assert train.main([*_tiny(folder), override, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_broken_folders_and_data_are_one_line(folder, tmp_path, capsys):
    import shutil

    def broken(name: str, change) -> Path:
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        change(copy)
        return copy

    cases = {
        "no tokenizer": (
            broken("a", lambda f: (f / "tokenizer.json").unlink()),
            "tokenizer.json: no such file",
        ),
        "bad config": (
            broken("b", lambda f: (f / "config.json").write_text("{")),
            "config.json: cannot be read",
        ),
        "gpt2": (
            broken("c", lambda f: _edit_json(f / "config.json", architectures=["GPT2LMHeadModel"])),
            "is not supported",
        ),
        "no weights": (
            broken("d", lambda f: (f / "model.safetensors").unlink()),
            "neither model.safetensors",
        ),
    }
    for name, (path, message) in cases.items():
        assert train.main([*_tiny(path), "--out", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (name, err)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        '{"prompt": "What is 2 + 3?", "answer": 5}\n{"prompt": "x", "answer": "five"}\n'
    )
    argv = [*_tiny(folder), "task=jsonl", f"data_path={rows}", "--out", str(tmp_path / "j")]
    assert train.main(argv) == 2
    assert "line 2: 'answer' must be an integer" in capsys.readouterr().err


def _edit_json(path: Path, **change) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


def test_a_jsonl_file_is_a_task(folder, tmp_path):
    from rlax_trpo.lm.word_problems import generate_problems

    rows = tmp_path / "rows.jsonl"
    lines = [
        json.dumps({"prompt": p.question, "answer": p.answer}) for p in generate_problems(300, 5)
    ]
    rows.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert train.main([*_tiny(folder), "task=jsonl", f"data_path={rows}", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "jsonl" and summary["eval_size"] == 16
