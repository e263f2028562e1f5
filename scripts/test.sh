#!/usr/bin/env bash
# test.sh - run the whole test suite against real Gitea and MinIO.
#
# Builds the servers on first use (cached outside the repository, keyed by
# version), starts them on loopback ports, runs `go test` with their
# addresses in the environment, and stops them by PID whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
# -p 1: one package at a time. The packages that talk to the servers
# (faulttest, gitstore, s3store, cli) each run their own tests in parallel
# already; running them side by side as well made one Gitea on two cores
# the bottleneck, and timing-bound tests (16 writers within 3 minutes, a
# reader's deadline in TestKillS3) failed for want of CPU, not of
# correctness.
exec scripts/testservers.sh with go test -p 1 -count=1 -timeout=30m "$@" ./...
