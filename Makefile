# The commands of the README: `make demo`, `make ui`, `make test` and `make docs`. Each installs what is missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install system-deps demo ui screenshots test test-quick lint docs bench clean

# PostgreSQL: the storage of the production Dagster instance in its test (devtools/local_postgres.py).
# Prometheus: scrapes the stream's metrics in its test (devtools/local_prometheus.py); without its
# recommended node exporter, a service of its own.
system-deps:
	@if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ] || [ ! -f /usr/share/java/mariadb-java-client.jar ] \
			|| ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v prometheus >/dev/null; then \
		echo "installing Debian packages: mariadb-server mariadb-client libmariadb-java postgresql prometheus"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
			mariadb-server mariadb-client libmariadb-java default-jre-headless postgresql >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends prometheus >/dev/null; \
	fi

$(STAMP): pyproject.toml
	@[ -x $(BIN)/python ] || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: system-deps $(STAMP)

demo: install
	$(BIN)/python -m devtools.demo

# A throwaway MariaDB with the demo's shop schema and `dagster dev` on binlake's code location.
ui: install
	$(BIN)/python -m devtools.ui

# docs/screenshots/*.png: the Dagster UI photographed by headless Chromium (installs chromium and playwright).
screenshots: install
	$(BIN)/python devtools/screenshots.py

# Two worker processes (pytest-xdist), each with its own MariaDB server and Spark session; tests are
# handed out one at a time, so the long lake-fault matrix is shared between them.
test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

# The quick tier (marker `quick`, tests/conftest.py: QUICK), for the edit-test loop; CI runs `make test`.
test-quick: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m quick

lint: install
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml) into site/; --strict: a broken link, anchor or path, or a page
# missing from the navigation, fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# Every benchmark, then one table of their figures against baselines and goals (bench/report.py;
# `--report` prints the table of the last runs).
bench: install
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) demo-lake .demo .ui bench/out site
