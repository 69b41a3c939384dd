# Two entry points that set everything up on a fresh machine:
#   make run   - install into .venv and run ppsim on scenarios/gpt.yaml with an HTML timeline
#   make test  - install into .venv (with test tools) and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
OUT    ?= out

.PHONY: run test bench lint clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/activate
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	mkdir -p $(OUT)
	$(BIN)/ppsim run scenarios/gpt.yaml --html $(OUT)/gpt.html --trace $(OUT)/gpt.trace.json

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2 tests

bench: $(VENV)/.installed-test
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/python bench/sim_speed.py

lint: $(VENV)/.installed-test
	$(BIN)/ruff check ppsim ppexec tests bench

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
