# The two commands of the README. Both set everything up first (scripts/install.sh is idempotent).
.PHONY: demo test install install-test bench pg

demo: install
	.venv/bin/relserve demo

test: install-test
	.venv/bin/pytest -q --durations=15

install:
	./scripts/install.sh

install-test:
	./scripts/install.sh --test

# the PostgreSQL extension (CREATE EXTENSION relserve); install-test builds it too
pg:
	$(MAKE) -C udfs/relserve
	$(MAKE) -C udfs/relserve install
