#!/usr/bin/env bash
# Compile-checks every CUDA kernel file (csrc/cuda/*.cu) with nvcc from PyPI, on a machine without a GPU: the
# objects are not linked (that needs a CUDA build of torch), but a kernel that does not compile fails here.
#   bash scripts/cuda_check.sh PYTHON [OUTDIR]
# PYTHON: an interpreter whose environment holds torch and requirements/cuda-check.txt (make cuda-check installs it).
set -euo pipefail
PY=${1:?usage: cuda_check.sh PYTHON [OUTDIR]}
OUT=${2:-build/cuda-check}
cd "$(dirname "$0")/.."
SP=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NVCC="$SP/nvidia/cu13/bin/nvcc"
[ -x "$NVCC" ] || { echo "cuda_check: $NVCC not found: pip install -r requirements/cuda-check.txt" >&2; exit 1; }
mkdir -p "$OUT"
# The flags torch's own extension builder uses; C10_CUDA_NO_CMAKE_CONFIGURE_FILE because the CPU wheel lacks the
# generated c10/cuda/impl/cuda_cmake_macros.h. sm_90 (Hopper) only: one architecture is enough to catch errors.
FLAGS=(-std=c++20 -gencode arch=compute_90,code=sm_90 -Xcompiler -fPIC --expt-relaxed-constexpr -Werror all-warnings
  -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
  -D__CUDA_NO_HALF2_OPERATORS__ -D_GLIBCXX_USE_CXX11_ABI=1 -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE
  -isystem "$SP/torch/include" -isystem "$SP/torch/include/torch/csrc/api/include" -Icsrc -Xptxas -v)
# All files at once (about 1.3 GB of memory each); ptxas -v's report (registers, shared memory, spills per kernel)
# stays in OUT/<file>.o.log for reading.
sources=(csrc/cuda/*.cu)
pids=()
for source in "${sources[@]}"; do
  object="$OUT/$(basename "${source%.cu}").o"
  "$NVCC" -c "$source" -o "$object" "${FLAGS[@]}" > "$object.log" 2>&1 &
  pids+=($!)
done
status=0
for k in "${!sources[@]}"; do
  source=${sources[$k]}
  log="$OUT/$(basename "${source%.cu}").o.log"
  if wait "${pids[$k]}"; then
    echo "cuda_check: $source ok ($(grep -c 'Compiling entry function' "$log") kernels)"
  else
    cat "$log" >&2
    echo "cuda_check: $source FAILED" >&2
    status=1
  fi
done
exit $status
