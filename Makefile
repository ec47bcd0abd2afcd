# dlscale: the two quick-start commands are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
VENV ?= .venv
PYTHON ?= python3
export PATH := $(abspath $(VENV))/bin:$(PATH)
SNAKEMAKE := $(VENV)/bin/snakemake
# Debian packages: graphviz (DAG pictures), Fashion-MNIST (demo data, offline),
# SLURM and munge (the test cluster).
# OpenMPI: Horovod across nodes (mpirun in the SLURM job).
# environment-modules: the `module` command of software.modules (tests).
# mariadb-server and slurmdbd: the test cluster's job accounting (sacct).
# chromium: the report's test (headless).
SYSTEM_PACKAGES := graphviz dataset-fashion-mnist slurm-wlm munge openmpi-bin libopenmpi-dev \
	environment-modules strace chromium mariadb-server slurmdbd

.PHONY: help setup setup-jax setup-torch horovod gpu-wheels sysdeps demo test test-loaded test-fast cluster-start cluster-stop dag bench lint docs clean

help:
	@echo "make demo   - set up and run the whole pipeline locally on config/demo.yaml"
	@echo "make test   - set up and run all tests (builds .venv-horovod and .venv-torch, starts a throw-away SLURM test cluster)"
	@echo "make test-loaded - make test while every core is kept busy by a busy loop (no test may depend on speed)"
	@echo "make test-fast - the unit tests alone (no cluster, no training run): the edit-test loop"
	@echo "make setup-jax - the JAX stack alone in .venv-jax (Keras 3 on JAX, no TensorFlow)"
	@echo "make setup-torch - the PyTorch environment of backend torch points (.venv-torch)"
	@echo "make horovod - build the Horovod environment (.venv-horovod; ~3 min the first time)"
	@echo "make dag    - draw results/dag.svg and results/rulegraph.svg from a dry run"
	@echo "make bench  - run the benchmarks in bench/ (results: docs/benchmarks.md)"
	@echo "make lint   - snakemake --lint, snakefmt --check and ruff check"
	@echo "make docs   - regenerate docs/configuration.md from config/schema.yaml"

# Each environment, once built, is kept under a key of what it holds (its name, the
# interpreter's version, the requirement files) and copied back by the next checkout that
# asks for the same (scripts/venvs.sh): a fresh clone's setup in seconds, not a minute.
# A changed requirement file builds the environment again from nothing.
venv_key = $(1)-$(shell { $(PYTHON) -c 'import sys; print(sys.version, sys.base_prefix)'; \
	cat $(2); } | sha256sum | cut -c1-16)
restore_or_build = scripts/venvs.sh restore $(1) $(2) || { \
	rm -rf $(1) && $(PYTHON) -m venv $(1) && $(3) && \
	{ scripts/venvs.sh keep $(1) $(2) || echo "note: $(1) was not kept"; }; }

# `pip install -e .` writes scripts/dlscale.egg-info in the checkout: the environments,
# built side by side (.ci/run, make -j2), take turns there (flock on pyproject.toml)
EDITABLE = flock pyproject.toml

MAIN_KEY = $(call venv_key,tensorflow,requirements.txt requirements-xprof.txt)
$(VENV)/.installed: requirements.txt requirements-xprof.txt pyproject.toml
	$(call restore_or_build,$(VENV),$(MAIN_KEY),\
	  $(VENV)/bin/pip install -q --upgrade pip && \
	  $(VENV)/bin/pip install -q -r requirements.txt && \
	  $(VENV)/bin/pip install -q --no-deps -r requirements-xprof.txt)
	$(EDITABLE) $(VENV)/bin/pip install -q --no-deps -e .
	touch $@

# The JAX stack alone (Keras 3 on JAX, no TensorFlow): README, "Run it on your cluster"
JAX_VENV ?= .venv-jax
JAX_KEY = $(call venv_key,jax,requirements-jax.txt)
setup-jax: $(JAX_VENV)/.installed
$(JAX_VENV)/.installed: requirements-jax.txt pyproject.toml
	$(call restore_or_build,$(JAX_VENV),$(JAX_KEY),\
	  $(JAX_VENV)/bin/pip install -q --upgrade pip && \
	  $(JAX_VENV)/bin/pip install -q -r requirements-jax.txt)
	$(EDITABLE) $(JAX_VENV)/bin/pip install -q --no-deps -e .
	touch $@

# The PyTorch environment (training.backend: torch; its points run with its python, as
# Horovod points run with .venv-horovod's): PyPI's wheel, about 5.6 GB with CUDA's
# libraries, 3 minutes the first time, kept as the others are (docs/frameworks.md)
TORCH_VENV ?= .venv-torch
TORCH_KEY = $(call venv_key,torch,requirements-torch.txt)
setup-torch: $(TORCH_VENV)/.installed
$(TORCH_VENV)/.installed: requirements-torch.txt pyproject.toml
	$(call restore_or_build,$(TORCH_VENV),$(TORCH_KEY),\
	  $(TORCH_VENV)/bin/pip install -q --upgrade pip && \
	  $(TORCH_VENV)/bin/pip install -q -r requirements-torch.txt)
	$(EDITABLE) $(TORCH_VENV)/bin/pip install -q --no-deps -e .
	touch $@

# The package's bytecode, written now as pip writes an installed package's: where Python
# writes none itself (PYTHONDONTWRITEBYTECODE, a read-only checkout) every Snakemake start,
# SLURM job step and training process compiled dlscale's modules again (0.04 s a start).
setup: $(VENV)/.installed
	$(VENV)/bin/python -m compileall -q scripts >/dev/null

# The Horovod environment (strategy: horovod). Horovod is built with Gloo (one node) and,
# where the machine has an MPI compiler (mpicc; Debian: libopenmpi-dev), with MPI too
# (several nodes); HOROVOD_MPI=0 builds without MPI. Horovod's setup.py compiles with
# make's -j8 unless MAKEFLAGS is set, and under this Makefile it is (ours, whose jobserver
# a recipe does not get): one file at a time. MAKEFLAGS=-j<cores> compiles one file a core
# (docs/horovod.md).
# The wheel is kept in HOROVOD_WHEELS under a name that says how it was
# built: pip's own cache would hand back a wheel built with other flags.
HOROVOD_VENV ?= .venv-horovod
HOROVOD_VERSION := 0.28.1
HOROVOD_MPI ?= $(if $(shell command -v mpicc),1,0)
HOROVOD_BUILD := $(if $(filter 1,$(HOROVOD_MPI)),mpi-gloo,gloo)
HOROVOD_WHEELS ?= $(HOME)/.cache/dlscale/horovod-$(HOROVOD_VERSION)-tf2.15.1-$(HOROVOD_BUILD)
HOROVOD_KEY = $(call venv_key,horovod-$(HOROVOD_VERSION)-$(HOROVOD_BUILD),requirements-horovod.txt)
$(HOROVOD_VENV)/.installed-$(HOROVOD_BUILD): requirements-horovod.txt pyproject.toml
	$(call restore_or_build,$(HOROVOD_VENV),$(HOROVOD_KEY),\
	  $(HOROVOD_VENV)/bin/pip install -q --upgrade pip wheel && \
	  $(HOROVOD_VENV)/bin/pip install -q -r requirements-horovod.txt && \
	  if ! ls "$(HOROVOD_WHEELS)"/horovod-*.whl >/dev/null 2>&1; then \
	    rm -rf "$(HOROVOD_WHEELS).tmp" && MAKEFLAGS=-j$$(nproc) \
	    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
	    HOROVOD_WITH_GLOO=1 $(if $(filter 1,$(HOROVOD_MPI)),HOROVOD_WITH_MPI=1,HOROVOD_WITHOUT_MPI=1) \
	    CXXFLAGS="-idirafter /usr/include" \
	    $(HOROVOD_VENV)/bin/pip wheel -q --no-deps --no-cache-dir --no-build-isolation \
	      -w "$(HOROVOD_WHEELS).tmp" horovod==$(HOROVOD_VERSION) && \
	    mv "$(HOROVOD_WHEELS).tmp" "$(HOROVOD_WHEELS)"; \
	  fi && \
	  $(HOROVOD_VENV)/bin/pip install -q --no-deps --force-reinstall "$(HOROVOD_WHEELS)"/horovod-*.whl && \
	  $(HOROVOD_VENV)/bin/pip install -q -r requirements-horovod.txt horovod==$(HOROVOD_VERSION))
	$(EDITABLE) $(HOROVOD_VENV)/bin/pip install -q --no-deps -e .
	$(HOROVOD_VENV)/bin/python -c "import horovod.tensorflow as hvd; print('horovod $(HOROVOD_VERSION): gloo', hvd.gloo_built(), 'mpi', hvd.mpi_built())"
	rm -f $(HOROVOD_VENV)/.installed-*
	touch $@ $(HOROVOD_VENV)/.installed

horovod: $(HOROVOD_VENV)/.installed-$(HOROVOD_BUILD)

# Installs what is missing when run as root (CI, containers); otherwise says what to install.
sysdeps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "note: not installed (needs root): $$missing"; \
	fi

demo: setup sysdeps
	$(SNAKEMAKE) --profile profiles/local --configfile=config/demo.yaml all
	$(SNAKEMAKE) --profile profiles/local --configfile=config/demo.yaml --report results/report.html
	@echo "plots: results/plots/   tables: results/tables/   report: results/report.html"

# setup and horovod in a make of their own (sysdeps may have just installed mpicc), side by
# side: the two environments are independent (55 s here, against 90 s one after the other)
# Three pytest workers on the 2 cores, a test file per worker at a time: the two SLURM
# files (each in order, on a partition of its own; mostly waiting for the scheduler's
# polls) on two, all the others on the third and, once a SLURM file is done, on its
# worker; the longest files handed out first (tests/conftest.py, LONGEST_FIRST). Four
# workers kept the cores busier but cost 18 % more CPU for the same tests (docs/benchmarks.md)
test: sysdeps
	$(MAKE) -j2 setup horovod
	$(MAKE) setup-torch
	$(VENV)/bin/python -m pytest -n 3 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The same tests on a machine whose cores are all busy with other work: one busy loop per
# core runs beside them until they end. Timing-dependent tests fail here.
test-loaded: setup sysdeps
	@loops=""; for i in $$(seq $$(nproc)); do ( while :; do :; done ) & loops="$$loops $$!"; done; \
	trap 'kill $$loops' EXIT; echo "busy loops: $$loops"; $(MAKE) test

# No PyTorch environment is built here (5.6 GB, minutes): without it the dry runs of the
# configs with torch points check planning's refusal and are skipped, said in a note
# (make setup-torch builds it; CI builds it and fails where it is missing)
test-fast: setup
	@test -e $(TORCH_VENV)/.installed || echo "note: $(TORCH_VENV) is not built: the" \
	  "tests that need PyTorch are skipped (make setup-torch builds it)"
	$(VENV)/bin/python -m pytest -n 2 tests/unit $(PYTEST_ARGS)

cluster-start:
	scripts/testcluster.sh start

cluster-stop:
	scripts/testcluster.sh stop

# make dag [CONFIG=config/demo.yaml]: pictures of what would run (nothing is run)
dag: setup
	mkdir -p results
	$(SNAKEMAKE) --dag dot $(if $(CONFIG),--configfile=$(CONFIG)) | dot -Tsvg > results/dag.svg.tmp
	$(SNAKEMAKE) --rulegraph dot $(if $(CONFIG),--configfile=$(CONFIG)) | dot -Tsvg > results/rulegraph.svg.tmp
	mv results/dag.svg.tmp results/dag.svg
	mv results/rulegraph.svg.tmp results/rulegraph.svg
	@echo "wrote results/dag.svg results/rulegraph.svg"

# CPU benchmarks (results: docs/benchmarks.md); bench/bench_training.py is for GPU nodes
bench: setup
	$(VENV)/bin/python bench/bench_data.py
	$(MAKE) cluster-start
	$(VENV)/bin/python bench/bench_slurm.py
	$(VENV)/bin/python bench/bench_analysis.py
	$(VENV)/bin/python bench/bench_telemetry.py

# The wheels bench/gpu_check.sh carries to a GPU machine without Keras (Python 3.12, x86-64)
gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
	  -r bench/gpu-wheels.txt
	@du -ch .whl/*.whl | tail -1

lint: setup
	$(SNAKEMAKE) --lint -n
	$(VENV)/bin/snakefmt --check Snakefile rules/
	$(VENV)/bin/ruff check .

docs: setup
	$(VENV)/bin/python -m dlscale.core.schema_docs config/schema.yaml > docs/configuration.md.tmp
	mv docs/configuration.md.tmp docs/configuration.md
	$(VENV)/bin/python -m dlscale.core.columns_docs --write docs/analysis.md

clean:
	rm -rf results logs benchmarks .snakemake
