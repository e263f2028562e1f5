#!/usr/bin/env bash
# test.sh - run the whole test suite against real Gitea and MinIO.
#
# Builds the servers on first use (cached outside the repository, keyed by
# version), starts them on loopback ports, runs `go test` with their
# addresses in the environment, and stops them by PID whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/testservers.sh with go test -count=1 -timeout=20m "$@" ./...
