# The two commands of the README. Both set everything up first (scripts/install.sh is idempotent).
.PHONY: demo test install install-test bench fdw

demo: install
	.venv/bin/relserve demo

test: install-test
	.venv/bin/pytest -q

install:
	./scripts/install.sh

install-test:
	./scripts/install.sh --test

# the PostgreSQL foreign data wrapper (C, PGXS); install-test builds it too
fdw:
	$(MAKE) -C udfs/relserve_fdw
	$(MAKE) -C udfs/relserve_fdw install
