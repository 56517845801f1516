#!/usr/bin/env bash
# One-shot check of the CUDA kernels on a GPU machine, sized for a short window (under 8 minutes: the build, the tests
# and the benchmark are each cut off by a timeout, 200 + 150 + 120 s at most):
# builds the extension from this checkout with the CUDA kernels, runs the GPU tests (tests/ops/test_cuda.py: parity
# with the CPU kernels, determinism, unwritten outputs, gradcheck, bad input, CUDA-graph capture), then times every
# op against its memory-bandwidth floor (benchmarks/bench_cuda.py) and prints a short table.
#
#   bash benchmarks/device_check.sh [OUTDIR]     # logs and bench_cuda.json go to OUTDIR ($OUT, else build/device-check)
#
# Needs on the machine: python3 with a CUDA build of torch, nvcc, CMake >= 3.26, ninja or make, scikit-build-core
# and pytest; nothing is downloaded (the build runs without isolation, the Rust hashing extension is not needed).
# TORCH_CUDA_ARCH_LIST picks the architectures (default 9.0, Hopper: one is enough and builds fastest).
# DRY_RUN=1 checks the script itself on a machine without a GPU: a CPU-only build, the GPU tests skip, and the
# benchmark runs on CPU at small sizes.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUTDIR=${1:-${OUT:-build/device-check}}
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
log() { echo "[device_check $(date +%T)] $*"; }

log "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | tee "$OUTDIR/gpu.txt"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda)'

export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
# One CUDA major version for nvcc and torch: two runtimes in one process, or a driver too old for nvcc's, fail later
# and less clearly.
DRY=$([ "${DRY_RUN:-0}" = 1 ] && echo 1 || echo 0)
if [ "$DRY" = 0 ] && [ ! -x "$CUDACXX" ]; then
  log "no nvcc at $CUDACXX: put it on PATH or set CUDACXX"
  exit 1
fi
nvcc_major=$("$CUDACXX" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
torch_major=$("$PY" -c 'import torch; print((torch.version.cuda or "none").split(".")[0])')
if [ "$DRY" = 0 ] && [ "$nvcc_major" != "$torch_major" ]; then
  log "nvcc ($CUDACXX) is CUDA $nvcc_major but torch is built with CUDA $torch_major: use the toolkit torch was built with"
  exit 1
fi
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
log "build with $CUDACXX for $TORCH_CUDA_ARCH_LIST"
start=$SECONDS
if ! timeout 200 "$PY" -m pip install --no-build-isolation --no-deps --no-index --target "$WORK/site" \
    -Ccmake.define.PYAGENTRL_WITH_CUDA="$([ "$DRY" = 1 ] && echo AUTO || echo ON)" -Cbuild.verbose=true \
    -Cbuild-dir="$WORK/cmake" . > "$OUTDIR/build.log" 2>&1; then
  tail -40 "$OUTDIR/build.log"
  log "BUILD FAILED (full log: $OUTDIR/build.log)"
  exit 1
fi
log "built in $((SECONDS - start)) s"
export PYTHONPATH="$WORK/site"

log "GPU tests"
# From another directory: the source tree (no compiled extension) must not shadow the build on sys.path.
(cd "$WORK" && timeout 150 "$PY" -m pytest -q -p no:cacheprovider --rootdir "$REPO" "$REPO/tests/ops/test_cuda.py") \
  > "$OUTDIR/tests.log" 2>&1
tests=$?
tail -15 "$OUTDIR/tests.log"

log "benchmark"
(cd "$WORK" && timeout 120 "$PY" "$REPO/benchmarks/bench_cuda.py" --json "$OUTDIR/bench_cuda.json" \
  $([ "$DRY" = 1 ] && echo --dry-run)) > "$OUTDIR/bench.log" 2>&1
bench=$?
[ $bench -eq 0 ] || tail -30 "$OUTDIR/bench.log"
sed -n '/^| case/,$p' "$OUTDIR/bench.log"
log "done in $SECONDS s: tests exit $tests, benchmark exit $bench"
[ $tests -eq 0 ] && [ $bench -eq 0 ]
