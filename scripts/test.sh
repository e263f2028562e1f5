#!/usr/bin/env bash
# test.sh - run the whole test suite against real Gitea and MinIO.
#
# Builds the servers on first use (cached outside the repository, keyed by
# version), starts them on loopback ports, runs `go test` with their
# addresses in the environment, and stops them by PID whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${RENDER_TESTSERVERS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/render-testservers.XXXXXX")}"
scripts/testservers.sh build
stop() { scripts/testservers.sh stop "$dir" || true; }
trap stop EXIT
scripts/testservers.sh start "$dir"
set -a
# shellcheck disable=SC1091
. "$dir/env"
set +a
go test -count=1 "${GO_TEST_FLAGS[@]:--timeout=20m}" "$@" ./...
