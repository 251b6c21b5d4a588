# privnlp — everything runs from a local .venv that this Makefile builds.
# torch is installed FIRST and pinned (an unpinned torch pulls several GB of CUDA wheels);
# CrypTen 0.4.1 is installed with --no-deps (its metadata needs the dead `sklearn` package).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.privnlp-installed
TORCH_VERSION ?= 2.13.0
export PIP_DISABLE_PIP_VERSION_CHECK=1
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export HF_DATASETS_OFFLINE=1
export FLWR_TELEMETRY_ENABLED=0
export TOKENIZERS_PARALLELISM=false

.PHONY: demo test lint format repro repro-realistic bench venv clean check-cards docs docs-serve readme

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip setuptools wheel
	$(BIN)/pip install -q torch==$(TORCH_VERSION)
	$(BIN)/pip install -q -e ".[mpc,fl,align,ann,secure,hf,vectors,distributed,dev,docs]"
	$(BIN)/pip install -q --no-deps crypten==0.4.1
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('$(TORCH_VERSION)'), torch.__version__"
	# bytecode once: where PYTHONDONTWRITEBYTECODE is set, every process would compile privnlp again (~0.2 s each)
	$(BIN)/python -m compileall -q privnlp
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/privnlp evaluate --all --preset quick --report-dir reports

# issue #30: both cores (pytest-xdist), one test file per worker at a time (module fixtures built once; tests ask the
# OS for ports and publish cache entries atomically, so two workers never collide); TEST_JOBS=1 runs in one process;
# -rs lists every skipped test with its reason at the end (CI has no GPU: the CUDA tests say so there), --durations
# the 30 slowest steps (where the CI time goes)
TEST_JOBS ?= 2
test: $(STAMP)
	$(BIN)/python -m pytest -q -rs -x --durations=30 --timeout=900 $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile) tests

# issue #30: ruff lint + format check (the configuration lives in pyproject.toml); `make format` applies it
LINT_PATHS := privnlp tests scripts benchmarks
lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

format: $(STAMP)
	$(BIN)/ruff check --fix $(LINT_PATHS)
	$(BIN)/ruff format $(LINT_PATHS)

# issue #17: regenerate the quick cards in an empty cache and fail when a headline number leaves the
# committed report's interval (ONLY=dp_sgd,gaussian_noise_update for a subset). Issue #30: CARDS_JOBS cards at a
# time (one process each, one pinned torch thread: the numbers do not depend on it); MODEL_CACHE=dir reuses a
# model cache built from empty in the same clean clone (.ci/run passes the test suite's)
CARDS_JOBS ?= 2
check-cards: $(STAMP)
	$(BIN)/python scripts/check_cards.py --jobs $(CARDS_JOBS) $(if $(ONLY),--only $(ONLY)) $(if $(MODEL_CACHE),--model-cache $(MODEL_CACHE))

# the slow reproductions, the realistic preset's included (tests/gradient/test_realistic_repro.py: pretrained
# MiniLM and the Debian-text LM; it rewrites the cards' realistic blocks), then every defense on the full preset
repro: $(STAMP)
	$(BIN)/python -m pytest -q -m slow --timeout=7200 tests
	$(BIN)/privnlp evaluate --all --preset full --report-dir reports

# the realistic preset's reproductions only (issue #17; about 2.5 h on one core, 80 min of it TAG / DLG at 2500 steps; the first run also builds the LM)
repro-realistic: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m slow --timeout=7200 tests/gradient/test_realistic_repro.py

# issue #21: the documentation site (mkdocs.yml; generated pages come from scripts/build_docs.py, a MkDocs hook)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict -a 127.0.0.1:8000

readme: $(STAMP)
	$(BIN)/python scripts/build_readme.py

bench: $(STAMP)
	for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) reports build *.egg-info
