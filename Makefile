# Two commands for people (`make lab`, `make test`) and two for maintainers (`make notebooks`, `make lint`).
# Every target first makes sure .venv exists and matches requirements.txt and pyproject.toml; it is only
# rebuilt when one of them changed since the last install.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_ARGS ?=

.PHONY: lab test notebooks lint setup clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e . \
	  || $(BIN)/python -m pip install --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks $(LAB_ARGS)

# 1) unit tests, hygiene tests and every notebook under the platform's default start method;
# 2) the notebooks again with spawn forced as the default (as on macOS and Windows).
test: $(STAMP)
	$(BIN)/python -m pytest --nbval
	PYTHONPATH=$(CURDIR)/tests/force_spawn $(BIN)/python -m pytest --nbval notebooks

# Re-execute every notebook top to bottom and store its outputs (run after changing a notebook or helpers).
notebooks: $(STAMP)
	$(BIN)/python -m helpers.regenerate

lint: $(STAMP)
	$(BIN)/ruff check helpers tests
	$(BIN)/nbqa ruff notebooks

clean:
	rm -rf $(VENV)
