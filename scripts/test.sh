#!/usr/bin/env bash
# test.sh - run the whole test suite against real Gitea, MinIO and the OCI
# registry, then the Flux and Argo CD end-to-end tests (internal/testinfra/fluxe2e,
# internal/testinfra/argocde2e) against a Flux stack (etcd, kube-apiserver, source-
# and kustomize-controller) and Argo CD (Redis, repo server and application
# controller) on the same API server, then the container tests
# (internal/testinfra/containere2e: render's image as a pod's sidecar, and the
# docker-compose quickstart) with a private Docker engine set up by
# scripts/containers.sh.
#
# Builds the servers on first use (cached outside the repository, keyed by
# version), starts them on loopback ports, runs `go test` with their
# addresses in the environment, and stops them by PID whatever happens.
#
# On a machine that has built nothing yet, what only the later phases need
# (the Flux stack, Argo CD, the container images) is built in the
# background, at the lowest CPU priority, while the main packages' tests
# run: those tests mostly wait on the servers, so the cores are free for
# the builds, and the tests keep the priority.
#
# Every phase's `go test -json` goes through scripts/testreport, which
# prints what plain `go test` prints and, at the end of the phase, where the
# time went (packages and slowest tests); the figures are kept as JSON in
# .test/ (git-ignored). docs/testing.md has the table and how to read it.
set -euo pipefail
cd "$(dirname "$0")/.."
flux=github.com/render-dev/render/internal/testinfra/fluxe2e
argocd=github.com/render-dev/render/internal/testinfra/argocde2e
containers=github.com/render-dev/render/internal/testinfra/containere2e
mkdir -p .test
log() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
t_start=$SECONDS

# gotest NAME ARGS...: go test -json ARGS, reported by testreport into
# .test/NAME.json; its exit code is go test's (it runs in a `bash -c` of its
# own, where set -o pipefail does not hold: without PIPESTATUS the exit code
# was testreport's, always 0, and a failing test passed the run).
gotest() {
	local name=$1
	shift
	go test -json "$@" | .test/testreport -out ".test/${name}.json"
	return "${PIPESTATUS[0]}"
}

# lane NAME FLAGS... -- PKG...: the packages one after another through
# scripts/testlane.sh (each test binary linked ahead of its turn, and kept
# between runs), reported like gotest.
lane() {
	local name=$1
	shift
	scripts/testlane.sh "$@" | .test/testreport -out ".test/${name}.json"
	return "${PIPESTATUS[0]}"
}

go build -o .test/testreport ./scripts/testreport
# One render binary for every package that runs it (testenv.RenderBinary),
# built as the Dockerfile builds it, beside the test binaries.
TESTBIN=$(scripts/testlane.sh --dir)
export TESTBIN
CGO_ENABLED=0 go build -trimpath -o "$TESTBIN/render" ./cmd/render
export RENDER_TEST_RENDER_BINARY="$TESTBIN/render"
# go test runs a subset of vet's checks before each package's tests; the
# lanes run test binaries built ahead, so vet runs here, whole.
go vet -trimpath ./...

mapfile -t pkgs < <(go list ./... | grep -vxF -e "$flux" -e "$argocd" -e "$containers")

# The servers every package needs, first (cached: a no-op).
scripts/testservers.sh build

# What only the later phases need, in the background.
prebuild_log=.test/prebuild.log
# setsid: its own process group, so that an early exit stops all of it.
setsid nice -n 19 bash -c 'RENDER_TESTSERVERS_FLUX=1 RENDER_TESTSERVERS_ARGOCD=1 scripts/testservers.sh build &&
	scripts/containers.sh images' >"$prebuild_log" 2>&1 &
prebuild_pid=$!
trap 'kill -- -$prebuild_pid 2>/dev/null || true' EXIT

rc=0
# Two lanes side by side, each with servers of its own (its own Gitea,
# MinIO and registry). Lane A: every package but those below, one package
# at a time (scripts/testlane.sh, the next package's test binary linked
# while this one runs, and kept between runs): those that talk to the
# servers run their own tests in parallel already. Lane B: the packages that make their own load and kill
# servers (the fault campaign, the fault tests, the simulated campaign),
# then the Flux and Argo CD phase. Lane A is the longer of the two main
# parts (about 22 minutes against lane B's 16 in CI), and before, the Flux
# and Argo CD phase waited for both, with one core idle for lane A's last
# minutes: now it runs in those minutes. Most of each lane is spent
# waiting on the servers, so side by side on two cores they take about
# half the wall time of one after the other (docs/testing.md). The
# container phase comes last, alone: TestSidecarPod times a render
# against the pod's 10 s grace period, and with other suites beside it
# that render was killed.
lane_b=(github.com/render-dev/render/internal/testinfra/chaos github.com/render-dev/render/internal/testinfra/faulttest
	github.com/render-dev/render/internal/testinfra/chaos/sim)
lane_a=()
for p in "${pkgs[@]}"; do
	case " ${lane_b[*]} " in *" $p "*) ;; *) lane_a+=("$p") ;; esac
done
t_a=$SECONDS
(
	rc_a=0
	scripts/testservers.sh with bash -c "$(declare -f lane); lane main -count=1 -timeout=30m $* -- ${lane_a[*]}" || rc_a=$?
	log "lane A, the main packages: $((SECONDS - t_a))s (rc=$rc_a)"
	exit $rc_a
) &
lane_a_pid=$!

t=$SECONDS
scripts/testservers.sh with bash -c "$(declare -f lane); lane faults -count=1 -timeout=30m $* -- ${lane_b[*]}" || rc=$?
log "lane B, the fault packages: $((SECONDS - t))s (rc=$rc)"

t=$SECONDS
if ! wait "$prebuild_pid"; then
	log "building the Flux stack, Argo CD or the images in the background failed; its log:"
	tail -n 40 "$prebuild_log" >&2 || true
	log "the phases below build them again in the foreground"
fi
trap - EXIT
log "waited $((SECONDS - t))s for the background builds"

t=$SECONDS
scripts/testservers.sh with --flux --argocd bash -c "$(declare -f gotest); gotest gitops -count=1 -timeout=30m $* $flux $argocd" || rc=$?
log "lane B, Flux and Argo CD: $((SECONDS - t))s (rc=$rc)"

t=$SECONDS
wait "$lane_a_pid" || rc=$?
log "waited $((SECONDS - t))s for lane A after lane B"

# The Gitea and MinIO images are built from the binaries the steps above
# built; with CI=true, a Docker engine that cannot start fails the run.
t=$SECONDS
scripts/containers.sh with bash -c "$(declare -f gotest); gotest containers -count=1 -timeout=30m $* $containers" || rc=$?
log "containers: $((SECONDS - t))s (rc=$rc)"
log "make test: $((SECONDS - t_start))s in all (rc=$rc)"
exit $rc
