# The two commands of the README. Both set everything up first (scripts/install.sh is idempotent).
.PHONY: demo test install install-test bench

demo: install
	.venv/bin/relserve demo

test: install-test
	.venv/bin/pytest -q

install:
	./scripts/install.sh

install-test:
	./scripts/install.sh --test
