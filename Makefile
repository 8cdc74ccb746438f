# The developer interface: CI calls `make test`; README's two commands are `make demo` and
# `make test`. Both work as root on a bare Debian 12: they install what is missing.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PKGS := python3-venv
PYTEST_ARGS ?=

.PHONY: test unit emulator demo deps apt clean

# Python side: a project-local venv (Debian's system Python refuses pip installs, PEP 668).
$(VENV)/.installed: pyproject.toml
	@python3 -c 'import venv, ensurepip' 2>/dev/null || $(MAKE) --no-print-directory apt
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

deps: $(VENV)/.installed

apt:
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

test: deps
	$(PY) -m pytest -q tests/unit tests/emulator $(PYTEST_ARGS)

unit: deps
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

emulator: deps
	$(PY) -m pytest -q tests/emulator $(PYTEST_ARGS)

demo: deps
	$(VENV)/bin/slurm-ipu demo

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
