# The two commands of the README. Both set everything up first (scripts/install.sh is idempotent).
.PHONY: demo test test-fast test-random test-alone mutants install install-test bench pg

demo: install
	.venv/bin/relserve demo

# the whole suite: the real engine, PostgreSQL, the browser, the fast tier. Two pytest-xdist
# workers: one runs every test on real parts in file order, the other the pure-logic tests
test: install-test
	.venv/bin/pytest -q --durations=15 -n 2 --dist loadgroup

# the fast tier for daily work: no engine, no PostgreSQL, no Ray cluster (a few minutes)
FAST = not engine and not postgres and not cluster and not gpu
test-fast: install
	.venv/bin/pytest -q --durations=10 -m "$(FAST)"

# the fast tier in three random orders (pytest-randomly; a failure names its seed: rerun it with
# `.venv/bin/pytest -p randomly --randomly-seed=N -m "..."`)
test-random: install
	for seed in 1 2 3; do .venv/bin/pytest -q -p randomly --randomly-seed=$$seed -m "$(FAST)" || exit 1; done

# every test module alone, each in a pytest process of its own (the fast tier of each)
test-alone: install
	.venv/bin/python scripts/modules_alone.py

# the mutation check (scripts/mutation_check.py; --fast: only the mutants whose tests need no
# engine or PostgreSQL)
mutants: install-test
	.venv/bin/python scripts/mutation_check.py

install:
	./scripts/install.sh

install-test:
	./scripts/install.sh --test

# the PostgreSQL extension (CREATE EXTENSION relserve); install-test builds it too
pg:
	$(MAKE) -C udfs/relserve
	$(MAKE) -C udfs/relserve install
