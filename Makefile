# The commands of the README: `make demo`, `make ui` and `make test`. Each installs what is missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install system-deps demo ui screenshots test lint bench clean

system-deps:
	@if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ] || [ ! -f /usr/share/java/mariadb-java-client.jar ]; then \
		echo "installing Debian packages: mariadb-server mariadb-client libmariadb-java"; \
		$(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
			mariadb-server mariadb-client libmariadb-java default-jre-headless >/dev/null; \
	fi

$(STAMP): pyproject.toml
	@[ -x $(BIN)/python ] || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: system-deps $(STAMP)

demo: install
	$(BIN)/python -m pipelines.demo

# A throwaway MariaDB with the demo's shop schema and `dagster dev` on binlake's code location.
ui: install
	$(BIN)/python -m orchestration.ui

# docs/screenshots/*.png: the Dagster UI photographed by headless Chromium (installs chromium and playwright).
screenshots: install
	$(BIN)/python docs/screenshots.py

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .

# Issue 13's benchmarks, then one table of its figures (bench/issue13.py; --report prints the last).
bench: install
	$(BIN)/python bench/issue13.py

clean:
	rm -rf $(VENV) demo-lake .demo .ui bench/out
