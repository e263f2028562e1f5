#!/usr/bin/env bash
# test.sh - run the whole test suite against real Gitea and MinIO, then the
# Flux and Argo CD end-to-end tests (internal/fluxe2e, internal/argocde2e)
# against Gitea, MinIO, the registry, a Flux stack (etcd, kube-apiserver,
# source- and kustomize-controller) and Argo CD (Redis, repo server and
# application controller) on the same API server, then the container tests
# (internal/containere2e: render's image as a pod's sidecar, and the
# docker-compose quickstart) with a private Docker engine set up by
# scripts/containers.sh.
#
# Builds the servers on first use (cached outside the repository, keyed by
# version), starts them on loopback ports, runs `go test` with their
# addresses in the environment, and stops them by PID whatever happens.
# The Flux stack and Argo CD run only for their own packages, so the other
# packages' tests do not share two cores with them.
set -euo pipefail
cd "$(dirname "$0")/.."
flux=github.com/render-dev/render/internal/fluxe2e
argocd=github.com/render-dev/render/internal/argocde2e
containers=github.com/render-dev/render/internal/containere2e
mapfile -t pkgs < <(go list ./... | grep -vxF -e "$flux" -e "$argocd" -e "$containers")
# -p 1: one package at a time. The packages that talk to the servers
# (faulttest, gitstore, s3store, cli) each run their own tests in parallel
# already; running them side by side as well made one Gitea on two cores
# the bottleneck, and timing-bound tests (16 writers within 3 minutes, a
# reader's deadline in TestKillS3) failed for want of CPU, not of
# correctness.
rc=0
scripts/testservers.sh with go test -p 1 -count=1 -timeout=30m "$@" "${pkgs[@]}" || rc=$?
scripts/testservers.sh with --flux --argocd go test -count=1 -timeout=30m "$@" "$flux" "$argocd" || rc=$?
# The Gitea and MinIO images are built from the binaries the steps above
# built; with CI=true, a Docker engine that cannot start fails the run.
scripts/containers.sh with go test -count=1 -timeout=30m "$@" "$containers" || rc=$?
exit $rc
