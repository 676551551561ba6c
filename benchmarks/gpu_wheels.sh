#!/usr/bin/env bash
# Wheels that a GPU machine with jax, flax, optax, chex and orbax already installed (Python
# 3.12, no network) lacks to run this project, its tests and benchmarks/gpu_suite.py, and
# the project's own wheel, into wheelhouse/ (git-ignored). jax, jaxlib and CUDA are never
# fetched. Craftax is brought for the Craftax-1M table; the other optional suites (Brax, MuJoCo
# Playground, Jumanji) are left out: their tests and configs skip without them.
#
#   benchmarks/gpu_wheels.sh [PUREJAXRL [CRAFTAX_BASELINES]]
#
# PUREJAXRL: a clone of luchris429/purejaxrl (a bare git directory or a work tree); its
# purejaxrl/ppo.py and wrappers.py are copied to wheelhouse/purejaxrl/ for the throughput
# reference. CRAFTAX_BASELINES: a clone of MichaelTMatthews/Craftax_Baselines; the files its
# ppo.py needs go to wheelhouse/craftax_baselines/ for benchmarks/craftax_baselines.py
# (--baselines wheelhouse/craftax_baselines). Neither project's code is ever committed here.
# On the GPU machine:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site wheelhouse/*.whl
#   export PYTHONPATH=$PWD:/tmp/site
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
if [[ $# -gt 2 ]]; then
    echo "gpu_wheels.sh: at most two arguments (a PureJaxRL clone, a Craftax_Baselines clone), got $#" >&2
    exit 2
fi
if [[ $# -eq 2 && ! -d "$2" ]]; then
    echo "gpu_wheels.sh: $2 is not a directory (a Craftax_Baselines clone)" >&2
    exit 2
fi
if [[ $# -eq 2 ]]; then
    set -- "$1" "$(cd "$2" && pwd)"
    if [[ ! -f "$2/ppo.py" ]] && ! git --git-dir="$2" cat-file -e HEAD:ppo.py 2>/dev/null; then
        echo "gpu_wheels.sh: $2 holds no ppo.py (neither a work tree nor a git directory of Craftax_Baselines)" >&2
        exit 2
    fi
fi
if [[ $# -ge 1 && ! -d "$1" ]]; then
    echo "gpu_wheels.sh: $1 is not a directory (a PureJaxRL clone)" >&2
    exit 2
fi
if [[ $# -ge 1 ]]; then
    set -- "$(cd "$1" && pwd)" "${@:2}"  # absolute: the script works from the checkout's root
fi
# PureJaxRL's file $2 from the clone $1 (a work tree, or a git directory) on stdout.
purejaxrl_file() {
    if [[ -f "$1/purejaxrl/$2" ]]; then
        cat "$1/purejaxrl/$2"
    else
        git --git-dir="$1" show "HEAD:purejaxrl/$2" 2>/dev/null ||
            git -C "$1" show "HEAD:purejaxrl/$2" 2>/dev/null
    fi
}
if [[ $# -ge 1 ]] && ! purejaxrl_file "$1" ppo.py >/dev/null; then
    echo "gpu_wheels.sh: $1 holds no purejaxrl/ppo.py (neither a work tree nor a git directory of PureJaxRL)" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
out=wheelhouse
python=${PYTHON:-python3}
mkdir -p "$out"
rm -f "$out"/*.whl

# Dependencies of rlax_trpo missing from that image, with the versions tested here, one
# version each (two versions of a package stop a --no-deps install).
packages=(
    gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6
    distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 decorator==5.3.1 gast==0.7.0
    pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
    craftax==1.6.1 imageio==2.38.1  # the Craftax-1M table (its environments need no pygame)
    # `rlax-trpo report`'s intervals (rliable below): arch < 8 and pandas < 3, which rliable
    # 1.2 imports with; the image's statsmodels, seaborn, scipy and matplotlib serve the rest
    arch==7.2.0 pandas==2.3.3
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$out" "${packages[@]}"

# The project itself and rliable 1.2 (pure Python; the registry holds rliable 1.2 as source).
"$python" -m pip wheel -q --no-deps -w "$out" . rliable==1.2.0

if [[ $# -ge 1 ]]; then
    mkdir -p "$out/purejaxrl"
    for f in ppo.py wrappers.py; do  # whole files only: through a temporary name
        purejaxrl_file "$1" "$f" >"$out/purejaxrl/$f.part"
        mv "$out/purejaxrl/$f.part" "$out/purejaxrl/$f"
    done
fi

if [[ $# -eq 2 ]]; then
    rm -rf "$out/craftax_baselines" "$out/craftax_baselines.part"
    mkdir -p "$out/craftax_baselines.part"
    if [[ -f "$2/ppo.py" ]]; then
        cp -r "$2/ppo.py" "$2/wrappers.py" "$2/models" "$2/logz" "$out/craftax_baselines.part/"
    else
        git --git-dir="$2" archive HEAD ppo.py wrappers.py models logz | tar x -C "$out/craftax_baselines.part"
    fi
    mv "$out/craftax_baselines.part" "$out/craftax_baselines"
fi

ls -l "$out"
total=$(du -sb "$out" | cut -f1)
echo "wheelhouse: $((total / 1024)) KiB (a device run carries at most 64 MiB with the tree)"
if ((total > 48 * 1024 * 1024)); then
    echo "gpu_wheels.sh: wheelhouse is over 48 MiB; the working tree must fit beside it" >&2
    exit 1
fi
