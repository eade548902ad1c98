# Two commands for people (`make lab`, `make test`) and a few for maintainers (`make notebooks`, `make lint`,
# `make test-under-load`). Every target first makes sure .venv exists and matches requirements.txt and
# pyproject.toml; it is only rebuilt when one of them changed since the last install.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_ARGS ?=
LAB_DIR  ?= notebooks
# torch: on Linux x86_64 the CPU build from PyTorch's CPU index (PyPI's default there is a CUDA build of
# several GB). TORCH_BUILD=default takes PyPI's build instead, e.g. `make lab TORCH_BUILD=default` on a
# machine with an NVIDIA GPU (delete .venv first if it already exists).
TORCH_BUILD ?= cpu
export TORCH_BUILD
# JupyterLab refuses to start as root ("Running as root is not recommended"), the usual user in containers
# and cloud notebooks: there `make lab` adds --allow-root by itself. A variable of its own, so that
# `make lab LAB_ARGS=...` keeps it.
USER_ID   ?= $(shell id -u)
ROOT_ARGS ?= $(if $(filter 0,$(USER_ID)),--allow-root)

.PHONY: lab test test-under-load test-browser notebooks lint setup clean check student site

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml tools/install_torch.py helpers/kernel.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python tools/install_torch.py
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e . \
	  || $(BIN)/python -m pip install --disable-pip-version-check --no-deps -e .
	$(BIN)/python -m helpers.kernel
	@$(BIN)/python tools/install_torch.py --report
	@touch $(STAMP)

lab: $(STAMP)
	@if [ -n "$(ROOT_ARGS)" ]; then echo "make lab: running as root, so JupyterLab is started with $(ROOT_ARGS)"; fi
	$(BIN)/jupyter lab --ServerApp.root_dir=$(LAB_DIR) $(ROOT_ARGS) $(LAB_ARGS)

# Is this machine ready for the course? Under 30 s, installs nothing: without .venv the checks that need
# only the standard library run with the system Python, and it says "run make setup first".
check:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m helpers.setup_check; else $(PYTHON) helpers/setup_check.py; fi

# The learner edition in student/ (git-ignored): solutions replaced by a note, outputs cleared.
# Open it with `make lab LAB_DIR=student`.
student: $(STAMP)
	$(BIN)/python -m helpers.student

# Unit tests, hygiene and lint (one process per test file), every notebook under the platform's default start method, the
# learner edition with spawn as the default (macOS, Windows), and the notebooks with forkserver as the
# default (Linux from Python 3.14): side by side where each pass can get a /dev/shm of its own, else one
# after another (tests/passes.py).
test: $(STAMP)
	$(BIN)/python tests/passes.py

# The notebooks under strict nbval with a busy loop on every usable core: no checked output may depend on
# an idle machine.
test-under-load: $(STAMP)
	$(BIN)/python tests/passes.py --under-load

# JupyterLab in a real headless Chromium: every notebook opened as a learner sees it, those with widgets
# run with Run All. Needs a Chromium (e.g. Debian's `chromium`); Playwright goes into .venv from
# requirements-browser.txt, not into the learners' requirements.txt.
BROWSER_STAMP := $(VENV)/.installed-browser

$(BROWSER_STAMP): requirements-browser.txt $(STAMP)
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements-browser.txt
	@touch $(BROWSER_STAMP)

# The course as a website (Sphinx + MyST-NB + sphinx-book-theme, pinned in requirements-site.txt and
# installed into .venv on first use, with requirements.txt as constraints): every notebook with its stored
# outputs (nothing is executed), README.md as the landing page, CHEATSHEET.md, INSTRUCTORS.md and
# site/setup.md, into build/site (git-ignored). `make site SITE_EDITION=learner` builds the learner
# edition, with no solutions at all, into build/site-learner. Open build/site/README.html in a browser.
SITE_STAMP   := $(VENV)/.installed-site
SITE_EDITION ?= full
SITE_OUT     := build/$(if $(filter learner,$(SITE_EDITION)),site-learner,site)
# Any Sphinx warning (a link to a missing page or section, an unreadable image) fails the build.
SITE_STRICT  ?= -W --keep-going

$(SITE_STAMP): requirements-site.txt requirements.txt $(STAMP)
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	  || { echo "make site needs Python 3.11 or newer in .venv (Sphinx 9 and sphinx-book-theme 1.4 do); the course itself runs on 3.10"; exit 2; }
	$(BIN)/python -m pip install --disable-pip-version-check -r requirements-site.txt -c requirements.txt
	@touch $(SITE_STAMP)

site: $(SITE_STAMP)
	@case "$(SITE_EDITION)" in full|learner) ;; *) echo "SITE_EDITION must be full or learner, not '$(SITE_EDITION)'"; exit 2;; esac
	rm -rf $(SITE_OUT) build/.site-doctrees/$(SITE_EDITION)
	SITE_EDITION=$(SITE_EDITION) $(BIN)/python -m sphinx -b html -q $(SITE_STRICT) -c site \
	  -d build/.site-doctrees/$(SITE_EDITION) . $(SITE_OUT)
	@echo "site ($(SITE_EDITION) edition): open $(SITE_OUT)/README.html"

# The JupyterLab check, then the website (both editions built first) in the same Chromium
# (tests/browser/site_check.py).
test-browser: $(BROWSER_STAMP) $(SITE_STAMP)
	$(BIN)/python tests/browser/lab_check.py
	$(MAKE) --no-print-directory site SITE_EDITION=full
	$(MAKE) --no-print-directory site SITE_EDITION=learner
	$(BIN)/python tests/browser/site_check.py

# Re-execute every notebook top to bottom and store its outputs (run after changing a notebook or helpers).
notebooks: $(STAMP)
	$(BIN)/python -m helpers.regenerate

lint: $(STAMP)
	$(BIN)/ruff check helpers tests tools examples conftest.py
	$(BIN)/ruff format --check helpers tests tools examples conftest.py
	$(BIN)/nbqa ruff notebooks

clean:
	rm -rf $(VENV)
