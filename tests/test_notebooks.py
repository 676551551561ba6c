"""Every notebook executes top to bottom at its small budget (RLAX_TRPO_SMALL=1).

Each notebook prints what it measured. For each, the patterns below must match the outputs a
minimum number of times, and every number they capture must be finite (a NaN return or
accuracy fails the test, not only a missing line).
"""

import importlib.metadata
import importlib.util
import math
import os
import re
from pathlib import Path

import conftest
import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _sync_module():
    spec = importlib.util.spec_from_file_location("sync", ROOT / "notebooks/sync_install_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = _sync_module()
N = r"(-?[0-9][0-9.,e+-]*|nan|inf|-inf)"  # a printed number, or what NaN/inf print as

# notebook -> (regex with captured numbers, minimum number of matches)
EXPECTED = {
    "quickstart.ipynb": [
        (r"final return per seed: \[([^\]]+)\]", 1),  # one number per seed
        (rf"lr [0-9]e-0[34]: final return {N}", 3),
        (rf"{N} env steps/s", 1),
    ],
    "trpo_anatomy.ipynb": [
        ("small run", 1),
        (rf"true residual after \d+ iterations: {N}, after 25: {N}", 1),
        (rf"1/2 s\^T F s of the full step = {N} \(max_kl {N}\)", 1),
        (rf"angle\(g, F\^-1 g\) = {N} degrees", 1),
        (rf"(?:vpg |npg |trpo |ppo ) *\d+ seeds x [0-9,]+ steps: final return {N} \+- {N}", 4),
    ],
    "grpo_group_size.ipynb": [
        ("small run", 1),
        (rf"MaxDigit-qa +G= *\d+ \w+ +1/\w+ +final +{N} \+- +{N}", 4),
    ],
    "grpo_language_model.ipynb": [
        ("small run", 1),
        (rf"max_digit: greedy accuracy {N} -> {N}", 1),
        (rf"add / \w+ *: greedy accuracy {N} -> {N}, final sampled length {N}", 3),
        ("partial_credit=0.5", 1),
    ],
    "sweeps.ipynb": [
        (rf"mean +{N} +IQM +{N} +95% CI \[ *{N}, *{N}\]", 3),
        (rf"{N} env steps/s", 1),
    ],
}


def _numbers_are_finite(match: re.Match) -> bool:
    """Every captured group holds one or more whitespace-separated numbers; all finite."""
    return all(
        math.isfinite(float(x.replace(",", "")))
        for g in match.groups()
        if g is not None
        for x in g.split()
    )


def test_the_value_check_catches_nan():
    pattern = EXPECTED["sweeps.ipynb"][0][0]
    good = "lr=0.001: mean  500.0  IQM  500.0  95% CI [ 500.0,  500.0]"
    bad = "lr=0.001: mean    nan  IQM    nan  95% CI [   nan,    nan]"
    assert _numbers_are_finite(re.search(pattern, good))
    assert not _numbers_are_finite(re.search(pattern, bad))


def test_every_notebook_is_covered():
    assert sorted(p.name for p in NOTEBOOKS) == sorted(EXPECTED)


def _repository() -> str:
    match = re.search(
        r'^Repository = "(https://[^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M
    )
    assert match, "pyproject.toml: [project.urls] Repository"
    return match.group(1)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_install_cell_and_colab_link_come_from_pyproject(path):
    url = _repository()
    nb = nbformat.read(path, as_version=4)
    first_md = next(c for c in nb.cells if c.cell_type == "markdown").source
    first_code = next(c for c in nb.cells if c.cell_type == "code").source
    slug = url.removeprefix("https://github.com/")
    link = f"https://colab.research.google.com/github/{slug}/blob/main/notebooks/{path.name}"
    assert f"[Open in Colab]({link})" in first_md
    assert f'REPOSITORY = "{url}"' in first_code
    assert first_code == sync.install_cell(url)  # `python notebooks/sync_install_cells.py`
    assert "YOUR_ACCOUNT" not in path.read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_refers_to_a_checkout(path):
    nb = nbformat.read(path, as_version=4)
    source = "\n".join(c.source for c in nb.cells)
    for pattern in (r"\.\./", r"configs/", r"train\.py", r"__file__", r"sys\.path", r"/work/"):
        assert not re.search(pattern, source), (path.name, pattern)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_with_full_budget_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "every code cell was executed"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure"
    text = "".join(o.get("text", "") for o in outputs)
    assert "small run" not in text and "RLAX_TRPO_SMALL" not in text, "a small-budget run"


def _fake_versions(installed):
    def version(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    return version


@pytest.mark.parametrize(
    "installed, pins",
    [
        ({}, []),  # no jax: the package's own requirement installs one
        ({"jax": "0.11.2", "jax-cuda12-plugin": "0.11.2"}, []),  # already compatible
        ({"jax": "0.12.1", "jax-cuda12-plugin": "0.12.1"}, ["jax[cuda12]<0.12"]),  # Colab GPU
        ({"jax": "0.13.0", "jax-cuda13-plugin": "0.13.0"}, ["jax[cuda13]<0.12"]),
        ({"jax": "0.12.0.dev20261101"}, ["jax<0.12", "jaxlib<0.12"]),  # CPU or TPU runtime
    ],
)
def test_the_install_cell_keeps_jax_and_its_cuda_plugin_together(installed, pins):
    namespace = {"importlib": importlib}
    exec(sync.JAX_PINS, namespace)
    assert namespace["jax_pins"](_fake_versions(installed)) == pins


def _execute(path: Path, monkeypatch, small: bool) -> str:
    """Runs the notebook in a fresh kernel importing this checkout; returns what it printed."""
    if small:
        monkeypatch.setenv("RLAX_TRPO_SMALL", "1")
    else:
        monkeypatch.delenv("RLAX_TRPO_SMALL", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, errors[0].get("evalue")
    return "".join(o.get("text", "") for o in outputs)


def _check_expected(name: str, text: str) -> None:
    for pattern, count in EXPECTED[name]:
        matches = list(re.finditer(pattern, text))
        assert len(matches) >= count, (name, pattern, text[-3000:])
        bad = [m.group(0) for m in matches if not _numbers_are_finite(m)]
        assert not bad, (name, bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_executes(name, monkeypatch):
    if name == "quickstart.ipynb" and _quickstart_reproducible():
        pytest.skip("run at full budget by test_quickstart_outputs_are_what_the_code_prints_now")
    _check_expected(name, _execute(ROOT / "notebooks" / name, monkeypatch, small=True))


def test_writing_a_run_folder_leaves_the_callers_matplotlib_backend_alone(tmp_path):
    """A notebook's inline figures survive `run()`: the run folder's plots use no pyplot."""
    import matplotlib
    import numpy as np

    from rlax_trpo.report.run_files import plot_curves

    before = matplotlib.get_backend()
    matplotlib.use("pdf")
    try:
        plot_curves(tmp_path / "c.png", {"a": np.ones((2, 5))}, 10, "title")
        assert matplotlib.get_backend() == "pdf" and (tmp_path / "c.png").stat().st_size > 0
    finally:
        matplotlib.use(before)


# What quickstart.ipynb prints that depends only on the code (not on the machine's speed).
_QUICKSTART_RESULTS = r"final return per seed: \[[^\]]*\]|lr [0-9]e-0[34]: final return \S+"


def _committed_text(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    return "".join(o.get("text", "") for c in cells for o in c.get("outputs", []))


def test_quickstart_results_are_found_in_its_committed_outputs():
    found = re.findall(_QUICKSTART_RESULTS, _committed_text(ROOT / "notebooks/quickstart.ipynb"))
    assert len(found) == 4, found  # the per-seed line and three learning rates


def _quickstart_reproducible() -> bool:
    """The committed quickstart figures are bitwise reproducible where the machine gives as
    many CPU devices as the committed run had, on the same CPU (XLA compiles for the host:
    the same code gave other per-seed returns on another CPU, and again on another virtual
    machine whose CPU is also named just "AMD EPYC": `cpu_signature` adds the family, model,
    stepping and feature flags), with the same jax (jax 0.11.2 gave other returns on the same
    CPU), and no GPU wrote them."""
    import jax

    from rlax_trpo.platform import cpu_signature, usable_cores

    committed = _committed_text(ROOT / "notebooks/quickstart.ipynb")
    devices = len(re.findall(r"CpuDevice\(id=\d+\)", committed))
    same_jax = f"| jax {jax.__version__} |" in committed
    return (
        devices == usable_cores()
        and cpu_signature() in committed
        and same_jax
        and "CUDA" not in committed
    )


@pytest.mark.slow
def test_quickstart_outputs_are_what_the_code_prints_now(monkeypatch):
    """Re-runs quickstart.ipynb at its full budget (about 70 s on 2 cores), checks what it
    prints as test_notebook_executes does, and compares its per-seed and per-learning-rate
    returns with the committed outputs: a code change that changes them needs
    `python notebooks/execute.py quickstart.ipynb`."""
    if not _quickstart_reproducible():
        pytest.skip("the committed outputs come from another device count, CPU model or jax")
    path = ROOT / "notebooks/quickstart.ipynb"
    # The committed outputs come from XLA's default code generation, not the suite's
    # fast-compile flags (tests/conftest.py).
    monkeypatch.setenv("XLA_FLAGS", conftest.USER_XLA_FLAGS)
    now = _execute(path, monkeypatch, small=False)
    _check_expected(path.name, now)
    expected = re.findall(_QUICKSTART_RESULTS, _committed_text(path))
    assert re.findall(_QUICKSTART_RESULTS, now) == expected, (
        "notebooks/quickstart.ipynb's outputs are stale: "
        "python notebooks/execute.py quickstart.ipynb"
    )


def test_execute_py_kernels_import_this_checkout():
    spec = importlib.util.spec_from_file_location("execute", ROOT / "notebooks/execute.py")
    execute = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(execute)
    environ = {"PYTHONPATH": f"/elsewhere{os.pathsep}{ROOT}"}
    execute.checkout_first(environ)
    assert environ["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"]
    empty: dict = {}
    execute.checkout_first(empty)
    assert empty == {"PYTHONPATH": str(ROOT)}
