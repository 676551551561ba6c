"""Hugging Face checkpoint folders in, and out: `config.json` and single or sharded
`*.safetensors` files to `DecoderLM` parameters, and back.

One naming rule maps every parameter: the Linen path joined with dots, `model.` in front
(except the untied `lm_head`), the leaf renamed (`kernel` -> `weight`, transposed from Flax's
`[in, out]` to torch's `[out, in]`; `scale` and `embedding` -> `weight`), and the stacked
`[L, ...]` leaves under `layers` split into `model.layers.{i}....`. Files are read with
`safetensors.safe_open` (the from-bytes readers of `safetensors.numpy` / `.flax` fail on BF16,
the dtype of real checkpoints). Every tensor of the folder must be used and every parameter
filled, with its shape: anything else is a `CheckpointError` naming the file and the tensor.
LoRA adapters are merged into their kernels on export (W + (alpha / r) A B), so transformers
loads the trained policy as a plain model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlax_trpo.lm.hf.config import CheckpointError, DecoderConfig, from_hf_config, to_hf_config

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# tensors some older checkpoints carry that are recomputed, not learned
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
_LEAF_NAMES = {"kernel": "weight", "scale": "weight", "embedding": "weight", "bias": "bias"}


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file as a dict, or a one-line `CheckpointError` naming it."""
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: cannot be read as JSON ({err})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value


def read_decoder_config(folder: Path, **overrides) -> DecoderConfig:
    """The `DecoderConfig` of a checkpoint folder's `config.json`."""
    path = Path(folder) / "config.json"
    return from_hf_config(read_json(path), str(path), **overrides)


def tensor_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it: from `model.safetensors.index.json`
    when the checkpoint is sharded, else from `model.safetensors` itself."""
    from safetensors import safe_open

    folder = Path(folder)
    if (folder / INDEX).is_file():
        weight_map = read_json(folder / INDEX).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{folder / INDEX}: no weight_map")
        found = {name: folder / file for name, file in weight_map.items()}
        for path in sorted(set(found.values())):
            if not path.is_file():
                raise CheckpointError(f"{folder / INDEX}: names {path.name}, which is missing")
        return found
    if not (folder / SINGLE).is_file():
        raise CheckpointError(f"{folder}: neither {SINGLE} nor {INDEX} is there")
    try:
        with safe_open(str(folder / SINGLE), framework="numpy") as f:
            return dict.fromkeys(f.keys(), folder / SINGLE)
    except Exception as err:  # safetensors raises its own SafetensorError
        raise CheckpointError(f"{folder / SINGLE}: not a safetensors file ({err})") from None


def hf_names(path: tuple[str, ...], num_layers: int) -> list[str]:
    """The checkpoint tensor name(s) of one parameter path: one per layer for `layers`."""
    *modules, leaf = path
    stem = ".".join([*modules, _LEAF_NAMES[leaf]])
    if modules[0] == "layers":
        stem = stem.removeprefix("layers.")
        return [f"model.layers.{i}.{stem}" for i in range(num_layers)]
    return [stem if modules[0] == "lm_head" else f"model.{stem}"]


def _flat(params: dict) -> dict[tuple[str, ...], Any]:
    from flax.traverse_util import flatten_dict

    return flatten_dict(params["params"] if "params" in params else params)


def _is_lora(path: tuple[str, ...]) -> bool:
    return path[-1] in ("lora_a", "lora_b")


def _read(files: dict[str, Path], name: str, shape: tuple[int, ...], transpose: bool):
    from safetensors import safe_open

    path = files[name]
    with safe_open(str(path), framework="numpy") as f:
        array = f.get_tensor(name)
    if transpose:
        array = array.T
    if tuple(array.shape) != tuple(shape):
        torch_order = (lambda s: tuple(s)[::-1]) if transpose else tuple
        raise CheckpointError(
            f"{path}: tensor {name} has shape {torch_order(array.shape)}, "
            f"the config needs {torch_order(shape)}"
        )
    return array


def load_params(folder: Path, cfg: DecoderConfig, template: dict) -> dict:
    """The checkpoint's tensors as parameters shaped like `template` (an abstract or random
    `DecoderLM(cfg)` tree), cast to `cfg.param_dtype`; LoRA leaves, which no checkpoint has,
    are left out. Checks that every tensor is used and every parameter filled."""
    from flax.traverse_util import unflatten_dict

    files = tensor_files(Path(folder))
    unused = {n for n in files if not n.endswith(IGNORED_SUFFIXES)}
    out = {}
    for path, leaf in _flat(template).items():
        if _is_lora(path):
            continue
        names = hf_names(path, cfg.num_layers)
        missing = [n for n in names if n not in files]
        if missing:
            raise CheckpointError(f"{folder}: tensor {missing[0]} is missing")
        transpose = path[-1] == "kernel"
        per_layer = leaf.shape[1:] if path[0] == "layers" else leaf.shape
        arrays = [_read(files, n, per_layer, transpose) for n in names]
        value = np.stack(arrays) if path[0] == "layers" else arrays[0]
        out[path] = value.astype(cfg.param_dtype)
        unused -= set(names)
    if cfg.tie_word_embeddings and "lm_head.weight" in unused:
        unused.discard("lm_head.weight")  # a tied head written out anyway: the embedding's copy
    if unused:
        name = sorted(unused)[0]
        what = f"a {cfg.family} model of this config"
        raise CheckpointError(f"{files[name]}: tensor {name} is not used by {what}")
    return {"params": unflatten_dict(out)}


def merged_tensors(params: dict, cfg: DecoderConfig) -> dict[str, np.ndarray]:
    """HF-named numpy tensors of `params`, LoRA adapters merged into their kernels."""
    flat = {k: np.asarray(v, np.float32) for k, v in _flat(params).items()}
    out = {}
    for path, value in flat.items():
        if _is_lora(path):
            continue
        if path[-1] == "kernel" and path[:-1] + ("lora_a",) in flat:
            a, b = flat[path[:-1] + ("lora_a",)], flat[path[:-1] + ("lora_b",)]
            value = value + (cfg.lora_alpha / cfg.lora_rank) * np.matmul(a, b)
        names = hf_names(path, cfg.num_layers)
        values = list(value) if path[0] == "layers" else [value]
        for name, v in zip(names, values, strict=True):
            out[name] = np.ascontiguousarray(v.T if path[-1] == "kernel" else v)
    return out


def save_pretrained(
    params: dict,
    cfg: DecoderConfig,
    folder: Path,
    dtype: str = "float32",
    max_shard_bytes: int | None = None,
    extra_files: dict[str, Path] | None = None,
) -> Path:
    """Write `params` as a Hugging Face checkpoint folder that transformers loads:
    `config.json`, `model.safetensors` (or shards of at most `max_shard_bytes` and their
    index), and copies of `extra_files` (name -> source: tokenizer.json and the like)."""
    import shutil

    import ml_dtypes
    from safetensors.numpy import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    tensors = {k: v.astype(np_dtype) for k, v in merged_tensors(params, cfg).items()}
    shards = _shards(tensors, max_shard_bytes)
    metadata = {"format": "pt"}
    if len(shards) == 1:
        save_file(tensors, str(folder / SINGLE), metadata=metadata)
    else:
        weight_map = {}
        for i, names in enumerate(shards):
            file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file({n: tensors[n] for n in names}, str(folder / file), metadata=metadata)
            weight_map.update(dict.fromkeys(names, file))
        total = sum(v.nbytes for v in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / INDEX).write_text(json.dumps(index, indent=2))
    config = to_hf_config(cfg, torch_dtype=dtype)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for name, source in (extra_files or {}).items():
        shutil.copyfile(source, folder / name)
    return folder


def _shards(tensors: dict[str, np.ndarray], max_bytes: int | None) -> list[list[str]]:
    """Tensor names in order, cut into shards of at most `max_bytes` (one when None)."""
    if max_bytes is None:
        return [list(tensors)]
    shards, size = [[]], 0
    for name, value in tensors.items():
        if shards[-1] and size + value.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += value.nbytes
    return shards
