#!/usr/bin/env bash
# bench.sh - side-by-side figures for render against real Gitea and MinIO.
#
# Builds the servers on first use (cached, like scripts/test.sh), starts
# them on loopback ports, runs the benchmark program (go run ./bench), which
# prints a table of figures against their targets and writes JSON results
# under .bench/, and stops the servers by PID whatever happens.
#
#   scripts/bench.sh                 every scenario, 5 runs each (about 10 minutes)
#   scripts/bench.sh -only 1,4       scenarios 1 and 4
#   scripts/bench.sh -runs 3 -quick  fewer runs, smaller sizes (to try it out)
#
# See docs/benchmarks.md for the scenarios and the published figures.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" != "--with-servers" ]]; then
	exec scripts/testservers.sh with "$0" --with-servers "$@"
fi
shift
mkdir -p .bench
go run ./bench -out .bench "$@"
# Watch latency p50/p99 on a local repository and on Gitea (issue 5), with
# the in-process watch loop; the table above has the built binary on Gitea.
# With -only, it runs only when scenario 3 (watch latency) is asked for.
only=""
for ((i = 1; i <= $#; i++)); do
	if [[ "${!i}" == "-only" ]]; then
		j=$((i + 1))
		only="${!j}"
	fi
done
if [[ -n "$only" && ",$only," != *",3,"* ]]; then
	exit 0
fi
echo
echo "== watch latency, local repository and Gitea (BenchmarkWatchLatency) =="
go test -run '^$' -bench BenchmarkWatchLatency -benchtime 100x ./internal/cli/ | tee .bench/watch-latency.txt
