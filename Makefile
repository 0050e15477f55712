# Set-up and checks. `make demo` and `make test` are the two commands the README promises.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is installed first, pinned, from this machine's wheel folder when it has one, so that the
# package's `torch>=2.6` range is already satisfied and pip never pulls a multi-GB CUDA build.
TORCH_PIN   ?= torch==2.13.0
# transformers likewise: the rules are verified on 5.24 (tuneproof.attention.rules VERIFIED); a newer one
# is the user's to try (the package's range is transformers>=5, and its output then says the
# predictions may drift), not the test suite's
TRANSFORMERS_PIN ?= transformers==5.24.0
WHEELS      := $(wildcard /opt/wheels)
FIND_LINKS  := $(if $(WHEELS),--find-links $(WHEELS),)

.PHONY: install demo test test-axolotl bench lint mutate clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check $(FIND_LINKS) "$(TORCH_PIN)" "$(TRANSFORMERS_PIN)"
	$(PIP) install -q --disable-pip-version-check $(FIND_LINKS) -e '.[dev]'
	touch $@

demo: install
	$(VENV)/bin/tuneproof doctor

test: install
	$(PY) -m pytest

# The Axolotl plugin against a real Axolotl, in its own venv (Axolotl 0.19 pins its own transformers,
# peft and accelerate; 0.19 is the newest on Python 3.11); not part of `make test`, which skips that file.
AX_VENV := .venv-axolotl
AX_PY   := $(AX_VENV)/bin/python

$(AX_VENV)/.installed: dev/axolotl-requirements.txt pyproject.toml Makefile
	test -x $(AX_PY) || python3.11 -m venv $(AX_VENV)
	$(AX_PY) -m pip install -q --disable-pip-version-check $(FIND_LINKS) "$(TORCH_PIN)"
	$(AX_PY) -m pip install -q --disable-pip-version-check $(FIND_LINKS) -r dev/axolotl-requirements.txt -e '.[train]'
	touch $@

test-axolotl: $(AX_VENV)/.installed
	AXOLOTL_DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(AX_PY) -m pytest tests/integrations/test_axolotl_plugin.py tests/labels/test_axolotl_labels.py

bench: install
	$(PY) bench/flops_vs_counter.py
	$(PY) bench/flops_startup.py
	$(PY) bench/probe_agreement.py
	$(PY) bench/flex_vs_sdpa.py
	$(PY) bench/bucketing.py
	$(PY) bench/timing_under_load.py
	$(PY) bench/gate.py
	$(PY) bench/merge.py
	$(PY) bench/callback.py
	$(PY) bench/rank_balance.py
	$(PY) bench/plan_vs_run.py
	$(PY) bench/tokens.py

# Mutation testing of the modules whose numbers and verdicts the CASE depends on (see README).
mutate: install
	rm -rf mutants
	$(VENV)/bin/mutmut run
	$(PY) dev/mutation_report.py
	$(PY) dev/named_mutants.py

lint: install
	$(VENV)/bin/ruff check src tests bench dev
	$(VENV)/bin/ruff format --check src tests bench dev
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants
