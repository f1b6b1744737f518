#!/usr/bin/env bash
# One entry point that sets everything up on a fresh machine, then runs a job.
#
#   ./bootstrap.sh demo            set up, then `hybrid demo` on the embedded default rack
#   ./bootstrap.sh test [ARGS...]  set up, then the whole test suite (ARGS go to pytest)
#   ./bootstrap.sh bench           set up, then the benchmarks (writes benchmarks/RESULTS.md)
#   ./bootstrap.sh setup           set up only
#
# Set-up is idempotent and incremental: the virtual environment (.venv) sees
# the system's packages, so an existing torch (a CUDA build on a GPU machine)
# is kept; only where no torch is importable is the CPU wheel torch==2.13.0
# installed. The extension is built with ninja against that torch, without
# pip's isolated build environment (which would resolve torch afresh and may
# pull a multi-GB CUDA build); object files are cached under build/.
set -euo pipefail
cd "$(dirname "$0")"

job="${1:-demo}"
[ $# -gt 0 ] && shift

python_bin="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv --system-site-packages .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

say() { echo "bootstrap: $*" >&2; }
# Installs byte-compile (no --no-compile): where PYTHONDONTWRITEBYTECODE is set, as on this project's machines,
# a module left uncompiled is compiled again by every process that imports it (the suite took 40 % longer).
pip_quiet=(--quiet --disable-pip-version-check)
if ! python -c "import torch" >/dev/null 2>&1; then
  say "installing torch==2.13.0 (the CPU wheel; about a minute)"
  pip install "${pip_quiet[@]}" torch==2.13.0
fi
if ! python - <<'PY'
import importlib.util, sys
need = ["numpy", "pytest", "xdist", "hypothesis", "expecttest", "ninja", "matplotlib", "tqdm", "viztracer",
        "selenium", "triton", "transformers", "accelerate", "torchao", "torchtitan"]
sys.exit(0 if all(importlib.util.find_spec(m) for m in need) else 1)
PY
then
  say "installing the other dependencies (requirements-dev.txt; a few minutes the first time)"
  pip install "${pip_quiet[@]}" -r requirements-dev.txt
fi

# The trace test opens exported traces in the Perfetto UI in headless Chromium
# (Debian's chromium + chromium-driver). Installed where we may; elsewhere that
# one test is skipped with the reason.
if [ "$job" = test ] && ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
   && [ "$(id -u)" = 0 ]; then
  { apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } \
    || echo "bootstrap: could not install chromium; the Perfetto trace test will be skipped" >&2
fi

# Incremental build of interop._C (ninja recompiles only what changed; setup.py compiles the sources in a few
# unity translation units, build/unity/unity_N.cpp, unless HYBRID_UNITY=0). The compiler's command lines go
# to build/build.log; the console shows one line per translation unit ("[1/2] build/unity/unity_0.cpp").
mkdir -p build
say "building the C++ extension interop._C (incremental; full log: build/build.log)"
MAX_JOBS="${MAX_JOBS:-2}" python setup.py --quiet build_ext --inplace >build/build.log 2>&1 </dev/null &
build_pid=$!
tail -n +1 -f build/build.log --pid="$build_pid" 2>/dev/null \
  | awk '/^\[[0-9]+\/[0-9]+\]/ { for (i = 2; i < NF; i++) if ($i == "-c" && $(i+1) ~ /\.cpp$/) { src = $(i+1) }
         sub(".*/csrc/", "csrc/", src); sub(".*/build/unity/", "build/unity/", src); print "  " $1 " " src; fflush() }' >&2
if ! wait "$build_pid"; then
  say "the build failed; the end of build/build.log:"
  tail -n 40 build/build.log >&2
  exit 1
fi

# The `hybrid` console script; the package is used in place (no second build). Reinstalled when
# pyproject.toml changed (its entry point or packages may have moved).
if [ ! -x .venv/bin/hybrid ] || [ pyproject.toml -nt .venv/.hybrid-installed ]; then
  say "installing the hybrid command (editable)"
  HYBRID_SKIP_EXTENSION=1 pip install "${pip_quiet[@]}" --no-build-isolation --no-deps -e . && touch .venv/.hybrid-installed
fi
say "ready"

case "$job" in
  setup) ;;
  demo) exec hybrid demo "$@" ;;
  test) exec python -m pytest -n 2 --dist worksteal "$@" ;;
  bench) exec python -m benchmarks "$@" ;;
  *) echo "usage: $0 {demo|test|bench|setup} [args...]" >&2; exit 2 ;;
esac
