# Two entry points on a fresh machine: `make demo` and `make test`. Both build .venv once
# (a stamp file records the inputs it was built from) and reuse it afterwards.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU wheel of torch lies on this machine's disk; pin it so pip never fetches a CUDA build.
TORCH := torch==2.13.0
PIP_QUIET := 2>&1 | { grep -v -e 'is ignored: it is neither a file nor a directory' || true; }

.PHONY: demo test lint typecheck unit clean bench chromium gpu-check gpu-wheels gpu-dali-parts fuzz hostile validate

$(STAMP): pyproject.toml setup.py csrc/nvtx_inject.c csrc/uring_reads.c Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip $(PIP_QUIET)
	$(BIN)/python -m pip install -q $(TORCH) $(PIP_QUIET)
	$(BIN)/python -m pip install -q -e '.[torch,dali,s3,gpu,dev]' $(TORCH) $(PIP_QUIET)
	$(BIN)/python -c "import ioprobe, torch, PIL, fsspec, s3fs, moto"
	touch $(STAMP)

# DLIO's configuration code, which the DLIO export is tested against, in a venv of its own:
# its imports change other libraries in the process that loads them (mpi4py makes Lightning
# look for an MPI library; dftracer takes SIGINT). Not its benchmark's own requirements:
# tests/requirements-dlio.txt says why.
DLIO_VENV := .venv-dlio
DLIO_STAMP := $(DLIO_VENV)/.installed
$(DLIO_STAMP): tests/requirements-dlio.txt Makefile
	test -x $(DLIO_VENV)/bin/python || $(PYTHON) -m venv $(DLIO_VENV)
	$(DLIO_VENV)/bin/python -m pip install -q --no-deps dlio-benchmark==2.0.0 $(PIP_QUIET)
	$(DLIO_VENV)/bin/python -m pip install -q -r tests/requirements-dlio.txt $(PIP_QUIET)
	$(DLIO_VENV)/bin/python -c "import dlio_benchmark.utils.config"
	touch $(DLIO_STAMP)

demo: $(STAMP)
	$(BIN)/ioprobe probe --time-budget 40

lint: $(STAMP)
	$(BIN)/ruff check ioprobe tests examples
	$(BIN)/ruff format --check ioprobe tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# The long fuzzing run: 20,000 mutated and random records through the loader and every view,
# and 2,000 records filled with hostile outside text through every view and the DLIO export
# (IOPROBE_FUZZ_EXAMPLES=N for more); the default test run tries a few thousand.
fuzz: $(STAMP)
	$(BIN)/python -m pytest -q -m long tests/unit/ground/test_fuzz_records.py tests/unit/ground/test_outside_text.py

# The advice held to reruns that take minutes on a 2-core host and swing with any other load
# (deselected from `make test`): each head-of-line cure against its rerun and its first
# advice, the workers rule on a slow server, persistent_workers' start-up saving and its
# shutdowns, accelerate's --cpu launch and a launch of two processes, ranks spawned by
# torch.multiprocessing, ranks sharing a host, the bandwidth cap predicted from a probe,
# tune's full run and its in-run trials, a shared server's cap found by two ranks, a capped
# node's one rank, the storage-rate what-if, blocked time and CPU in one worker, a skewed
# stream dealt evenly, a WebDataset's stream split by sample and its what-ifs rerun, a
# streaming Hugging Face dataset's rows spread over its files, and the advice matrix's share
# (tests/benchmarks/bench_advice.py runs the whole matrix). Run on a quiet host.
validate: $(STAMP)
	$(BIN)/python -m pytest -q -m long tests/integration/watch/test_head_of_line.py tests/integration/watch/test_loader_sim.py \
	  tests/integration/whatif/test_workers_prediction_remote.py tests/integration/watch/test_epoch_starts.py \
	  tests/integration/run/test_ranks_launchers.py tests/integration/watch/test_ddp_watch.py \
	  tests/integration/whatif/test_workers_prediction_bandwidth.py tests/integration/tune/test_cli_tune.py \
	  tests/integration/tune/test_in_run_lightning.py tests/integration/probe/test_distributed_probe.py \
	  tests/integration/whatif/test_prediction_accuracy.py tests/integration/watch/test_worker_time.py \
	  tests/integration/watch/test_stream_imbalance.py tests/integration/watch/test_epoch_ends.py \
	  tests/integration/watch/test_two_node_watch.py tests/integration/watch/test_stream_imbalance_wds.py \
	  tests/integration/watch/test_stream_imbalance_hf.py

# The hostile round (docs/guarantees.md): generated cases of the nine families of issue 29 through
# the real CLI, each judged on hangs, tracebacks, secrets shown and outputs lost (about 3 minutes)
hostile: $(STAMP)
	$(BIN)/python tests/hostile_round.py

# The browser tests (tests/support/browser.py) drive real headless Chromium; install it where it is missing.
# `env` carries DEBIAN_FRONTEND through sudo (which drops the caller's environment).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

# The tests that measure nothing against the clock run two or more at a time, then the ones
# that do (marked serial, tests/conftest.py) run alone, as a quiet host would; a failure in
# the first part still lets the second run, and either fails the target
test: lint typecheck chromium $(DLIO_STAMP)
	@rc=0; \
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 -m 'not long and not serial' || rc=$$?; \
	$(BIN)/python -m pytest -q -m 'serial and not long' --durations=20 || rc=$$?; \
	exit $$rc

# On a GPU machine whose Python already has a CUDA build of torch (and maybe no index): install
# ioprobe beside that torch without touching it, run every test marked gpu and the GPU
# benchmarks in two steps (step 1 without DALI, step 2 DALI's, only where DALI is installed) and
# write one Markdown file. Missing packages come from the wheels in WHEELS, which
# `make gpu-wheels GPU_PY=3.12` fetches where an index is reachable (they fit one call to a
# borrowed machine). DALI comes from the parts gathered in DALI_PARTS over earlier calls, which
# `make gpu-dali-parts GPU_PY=3.12` makes in DALI_DIR and says how to carry; the calls are in
# docs/benchmarks.md, "How to run it on a borrowed GPU machine".
GPU_PYTHON ?= python3
WHEELS ?= .whl
DALI_PARTS ?=
DALI_DIR ?= .dali-parts
GPU_REPORT ?= gpu-check.md
GPU_PY ?= 3.12

gpu-check:
	$(GPU_PYTHON) tests/gpu_check.py --wheels $(WHEELS) $(if $(DALI_PARTS),--dali-parts $(DALI_PARTS)) --report $(GPU_REPORT)

gpu-wheels:
	$(PYTHON) tests/gpu_check.py --download $(WHEELS) --python-version $(GPU_PY)

gpu-dali-parts:
	$(PYTHON) tests/gpu_check.py --download-dali $(DALI_DIR) --wheels $(WHEELS) --python-version $(GPU_PY)

bench: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_storage.py

clean:
	rm -rf $(VENV) .venv-gpu .venv-dlio build *.egg-info
