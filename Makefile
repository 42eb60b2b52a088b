# rlcollect: `make demo`, `make test`, `make lint` on a machine with only Python and pip.
# `make venv` is keyed on a stamp file: it reinstalls only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint docs clean

venv: $(STAMP)

# torch is pinned and installed first: that pin is the CPU build (an unpinned torch pulls the
# multi-GB CUDA build); pip then finds it satisfied when installing rlcollect's dependencies.
# editable_mode=compat puts the checkout on sys.path through a plain .pth line, which type
# checkers follow (setuptools' default editable import hook is invisible to mypy and pyright).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install -e ".[dev,torchrl,ray,envpool,atari,minari,logging,video,docs]" \
		--config-settings editable_mode=compat
	touch $(STAMP)

demo: venv
	$(BIN)/rlcollect collect --env CartPole-v1 --frames 20480 --num-envs 8 --out runs/demo --seed 0 --force
	$(BIN)/rlcollect inspect runs/demo

test: venv
	$(BIN)/python -m pytest

lint: venv
	$(BIN)/ruff check rlcollect tests bench
	$(BIN)/mypy rlcollect
	$(BIN)/mypy --python-version 3.10 rlcollect  # the oldest Python pyproject.toml allows

# the documentation site (the README as its front page, docs/pages/*.md, the API from the docstrings) into site/;
# warnings are errors, as in CI
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) runs/demo site
