# Two entry points that set everything up on a fresh machine:
#   make run   - install ppsim into .venv (its core dependencies only) and run it on scenarios/gpt.yaml,
#                writing the HTML timeline and the Chrome trace
#   make test  - install into .venv (with torch, DeepSpeed and test tools) and run the whole test suite
# For the inner loop: make test-fast leaves out the end-to-end runs of DeepSpeed and torch (marked slow).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= out
TORCH_VERSION     ?= 2.13.0
DEEPSPEED_VERSION ?= 0.19.8

.PHONY: run test test-fast bench bench-accuracy lint clean browser

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet -e .
	touch $@

# torch first and pinned (the CPU build on disk; an unpinned torch pulls a multi-GB CUDA build), then
# deepspeed as pure Python against that torch (no op builds, no build isolation)
$(VENV)/.installed-test: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet --no-build-isolation deepspeed==$(DEEPSPEED_VERSION)
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	mkdir -p $(OUT)
	$(BIN)/ppsim run scenarios/gpt.yaml --html $(OUT)/gpt.html --trace $(OUT)/gpt.trace.json

# the browser tests load the HTML pages in headless Chromium: Debian's chromium, installed once
# (as root, or through sudo) where no Chromium / Chrome is on PATH yet
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null \
	|| { command -v apt-get >/dev/null && SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo) \
	     && $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium; } \
	|| echo "warning: could not install chromium; the browser tests will be skipped"

# the whole suite, the slowest tests named at the end (CI time is part of the developer experience)
test: $(VENV)/.installed-test browser
	$(BIN)/python -m pytest -q -n 2 --durations=15 tests

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2 -m "not slow" tests

bench: $(VENV)/.installed-test
	$(BIN)/python bench/sim_speed.py

# prediction against DeepSpeed over the matrix of bench/accuracy.py (~20 min on 2 cores)
bench-accuracy: $(VENV)/.installed-test
	$(BIN)/python bench/accuracy.py

# ruff over the code, and mypy over ppsim and ppexec ([tool.mypy] in pyproject.toml)
lint: $(VENV)/.installed-test
	$(BIN)/ruff check ppsim ppexec tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
