# The developer interface: CI calls `make test`; README's two commands are `make demo` and
# `make test`. Both work as root on a bare Debian 12: they install what is missing.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Debian 12's Slurm 22.05 and munge for the lab, its headers and gcc for the SPANK plugin,
# lua5.1 (the Lua Slurm embeds) to unit-test the rendered job_submit.lua, slurmrestd (REST
# submissions are tested on 24.11 and later), and the system Python
# with venv: `make install` puts the package in a venv on /usr/bin/python3 for every user; GNU patch
# applies render's slurm.conf.diff (docs/admin.md); musl-tools builds slurm-ipu-hook (and the lab's
# vipu) static with musl, whose start costs a third of glibc's (spank/Makefile).
SYSTEM_PKGS := slurm-wlm munge libslurm-dev gcc musl-tools make numactl hwloc lua5.1 python3 python3-venv patch \
  slurmrestd
# What `make install` itself installs on a node: the tools it builds with, never Slurm, munge or
# libslurm (the node's own Slurm is the one it builds against).
INSTALL_PKGS := gcc musl-tools make python3 python3-venv patch
# The real-Slurm tier's lab also runs accounting as sites do (`slurm-ipu lab up --accounting`):
# slurmdbd on a MariaDB of the lab's own. The server and client cores only: no service is set up.
ACCOUNTING_PKGS := slurmdbd mariadb-server-core mariadb-client-core
# What `make deb` runs: dpkg-buildpackage and lintian; the build dependencies (debhelper, pybuild, the
# headers of the Slurm the packages are for) are debian/control's, which it installs itself
# (apt-get build-dep): a build machine's concern, never a node's.
DEB_PKGS := dpkg-dev lintian
PYTEST_ARGS ?=

.PHONY: deb deb-check slurm-installed apt-deb test test-long unit emulator slurm slurm-24.11 slurm-26.05 slurm-25.11 \
  slurm-built bench demo deps apt apt-accounting spank clean lint install install-tools uninstall install-check clean-room generated

# `make install [SITE=site.yaml] [PREFIX=/opt/slurm-ipu] [DESTDIR=]` (docs/admin.md): the package in
# its own venv on the system Python (every user runs ipurun from it, none of root's files),
# slurm-ipu and ipurun in BINDIR, the SPANK plugin built against this host's Slurm in its plugin
# directory; with SITE, the site description itself (the one configuration file, at install.site),
# the rendered hook wrapper and the slurm-ipu service's unit too.
PREFIX ?= /opt/slurm-ipu
BINDIR ?= /usr/local/bin
DESTDIR ?=
SITE ?=
SYSTEM_PYTHON ?= /usr/bin/python3
SLURM_PREFIX ?=
# Where spank_ipu.so goes: empty, the site description's slurm.plugin_dir (SITE), else beside the
# plugins of the Slurm the node runs (slurm/installation.py: Debian's or a site-built one's).
PLUGIN_DIR ?=
IVENV = $(DESTDIR)$(PREFIX)/venv

# Python side: a project-local venv (Debian's system Python refuses pip installs, PEP 668).
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

deps: apt $(VENV)/.installed spank

spank: apt
	@$(MAKE) -s -C spank

# Installs only what is missing; a machine that has everything makes no apt call at all.
apt apt-accounting install-tools apt-deb: PKGS = $(if $(filter apt-accounting,$@),$(ACCOUNTING_PKGS),$(if $(filter \
  install-tools,$@),$(INSTALL_PKGS),$(if $(filter apt-deb,$@),$(DEB_PKGS),$(SYSTEM_PKGS))))
apt apt-accounting install-tools apt-deb:
	@missing=$$(for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$(echo $$missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# The example site description and docs/options.md, from the option table (slurm_ipu/config/options.py);
# a unit test fails when they differ from what this writes.
generated: $(VENV)/.installed
	$(PY) -m slurm_ipu.deploy.example

# ruff's rules are pinned in pyproject.toml; CI runs this through `make test`.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check slurm_ipu tests

# Every tier, each timed (tests/tiers.sh prints the times at the end): side by side the real-Slurm
# tier on the host's 22.05 (all but the long ones) and, in sequence, the bookworm clean-room (make
# install, the Debian packages), unit, emulator and a few host real-Slurm modules of their own labs
# (tests/tiers.sh: BESIDE); then side by side the trixie and sid chroots: the Debian
# packages, and the release-sensitive real-Slurm tests on 24.11 and 26.05 against them
# (tests/slurm/conftest.py: RELEASE, LONG).
test: deps apt-accounting lint
	@PY=$(PY) PYTEST_ARGS='$(PYTEST_ARGS)' tests/tiers.sh

# The storms and the 64-host lab, then the tier on a Slurm built from source (a developer's run
# before a release; not in CI's budget).
test-long: deps apt-accounting
	$(PY) -m pytest -q tests/slurm -m long $(PYTEST_ARGS)
	@$(MAKE) -s slurm-25.11

# The Debian packages for this machine's Debian and Slurm (docs/admin.md, "Packages"): slurm-ipu,
# slurm-ipu-spank, slurm-ipu-lab in build/deb (DEB_OUT=), lintian-checked. DEB_REVISION=N numbers rebuilds.
deb: apt-deb
	@templates/debian/build.sh

# The packages as a site uses them, on this machine's Slurm: built, installed with apt, a lab on them,
# an upgrade under a running IPU job, remove and purge (tests/install/deb_check.sh).
deb-check: apt apt-deb
	@tests/install/deb_check.sh

# The real-Slurm tier (SLURM_MARKS) against the Debian packages, installed here for the run and
# purged after, instead of the checkout: the trixie and sid chroots run it (tests/install/installed_tier.sh).
slurm-installed: apt apt-accounting apt-deb
	@SLURM_MARKS='$(SLURM_MARKS)' PYTEST_ARGS='$(PYTEST_ARGS)' tests/install/installed_tier.sh

# make install into a scratch root, the lab on the installed files, make uninstall.
install-check: apt spank
	@tests/install/check.sh

# The same at the default paths in a bare Debian 12 chroot (debootstrap; its base is cached in
# /var/tmp/slurm-ipu-cleanroom-cache): make install must bring everything it needs itself; then the
# Debian packages there (deb-check).
clean-room:
	@CLEAN_ROOM_TARGET='install-check deb-check' tests/install/clean_room.sh

# The Debian packages (deb-check), then the release-sensitive real-Slurm tests against them
# (slurm-installed), on Debian 13's Slurm 24.11 and Debian unstable's 26.05, each in a bare chroot
# built the same way (bases cached beside bookworm's); the host keeps Debian 12's 22.05 for `make
# slurm` (the checkout). Times: docs/performance.md.
slurm-24.11:
	@CLEAN_ROOM_SUITE=trixie CLEAN_ROOM_TARGET='deb-check slurm-installed' SLURM_MARKS='release and not long' tests/install/clean_room.sh

slurm-26.05:
	@CLEAN_ROOM_SUITE=sid CLEAN_ROOM_TARGET='deb-check slurm-installed' SLURM_MARKS='release and not long' tests/install/clean_room.sh

# A Slurm built from its release source (SLURM_SRC=, by default Slurm 25.11's beside the checkout in
# ../shared/slurm-src) into /opt/slurm in a bare bookworm chroot with no Debian Slurm: make install
# SLURM_PREFIX=/opt/slurm, then the release-sensitive real-Slurm tests on it (tests/install/site_built.sh).
# The build (about 4 minutes on two cores) is cached beside the chroot bases, keyed by the tarball's
# sha256. In `make test-long`; docs/slurm.md says what differs on 25.11.
SLURM_SRC ?= $(firstword $(wildcard $(CURDIR)/../shared/slurm-src/slurm-25.11*.tar.*))
slurm-25.11:
	@CLEAN_ROOM_SUITE=bookworm CLEAN_ROOM_TARGET=slurm-built SLURM_MARKS='release and not long' \
	  SLURM_SRC='$(SLURM_SRC)' tests/install/clean_room.sh

# Inside that chroot (tests/install/clean_room.sh runs it).
slurm-built:
	@SLURM_MARKS='$(SLURM_MARKS)' PYTEST_ARGS='$(PYTEST_ARGS)' tests/install/site_built.sh

unit: deps
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

emulator: deps
	$(PY) -m pytest -q tests/emulator $(PYTEST_ARGS)

# Which real-Slurm tests (pytest -m): all but the long ones; the chroots above, the release ones.
SLURM_MARKS ?= not long
slurm: deps apt-accounting
	$(PY) -m pytest -q tests/slurm -m '$(SLURM_MARKS)' $(PYTEST_ARGS)

bench: deps
	$(PY) tests/bench/ipurun_overhead.py
	$(PY) tests/bench/submit_latency.py
	$(PY) tests/bench/prolog.py
	$(PY) tests/bench/storm.py --rounds 2
	$(PY) tests/bench/storm.py --rounds 2 --pods 2
	$(PY) tests/bench/storm.py --rounds 2 --model allocation --drill 200
	$(PY) tests/bench/storm.py --jobs 200 --nodes 16 --pods 4
	$(PY) tests/bench/storm.py --jobs 200 --nodes 64 --pods 16
	$(PY) tests/bench/curves.py
	$(PY) tests/bench/memory.py
	$(PY) tests/bench/job_submit_cost.py
	$(PY) tests/bench/health_pass.py
	$(PY) tests/bench/idle_connections.py

demo: deps
	$(VENV)/bin/slurm-ipu demo

# make install touches no Slurm of the node's: it installs only the tools it builds with, finds
# the Slurm the node runs (SLURM_PREFIX, else its daemons, else PATH) and builds the SPANK plugin
# against that Slurm's headers, refusing in one line when they are missing or of another release.
install: install-tools
	@PYTHONPATH=$(CURDIR) $(SYSTEM_PYTHON) -P -m slurm_ipu.slurm.installation '$(SLURM_PREFIX)'
	@test -x $(IVENV)/bin/python || $(SYSTEM_PYTHON) -m venv $(IVENV)
	@$(IVENV)/bin/python -m pip install -q --disable-pip-version-check --upgrade .
	@man=$$(mktemp -d) && trap 'rm -rf "$$man"' EXIT && $(IVENV)/bin/python -P -m slurm_ipu.manpages "$$man" && \
	  $(IVENV)/bin/python -P -m slurm_ipu.deploy.install install --prefix '$(PREFIX)' --destdir '$(DESTDIR)' \
	  --bindir '$(BINDIR)' --spank-src spank --slurm-prefix '$(SLURM_PREFIX)' --plugin-dir '$(PLUGIN_DIR)' \
	  --manpages "$$man" $(if $(SITE),--site '$(SITE)')

uninstall:
	@test -x $(IVENV)/bin/python || { echo "uninstall: no slurm-ipu install at $(DESTDIR)$(PREFIX); set PREFIX" >&2; exit 2; }
	@$(IVENV)/bin/python -P -m slurm_ipu.deploy.install uninstall --prefix '$(PREFIX)' --destdir '$(DESTDIR)' \
	  $(if $(FORCE),--force)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
	$(MAKE) -s -C spank clean
