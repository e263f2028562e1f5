#!/usr/bin/env bash
# testservers.sh - real Gitea, MinIO and OCI registry servers for integration
# tests, and on request a Flux stack (etcd, kube-apiserver, source- and kustomize-controller)
# and Argo CD (Redis, argocd-repo-server, argocd-application-controller) on that API server.
#
# Binaries are built from the Go module proxy and cached outside the repo under
# ${RENDER_CACHE_DIR:-$HOME/.cache/render}/bin/<name>-<version>. Servers run on
# free 127.0.0.1 ports with all state in a throwaway directory.
#
# Usage:
#   scripts/testservers.sh build                 build + cache binaries (no-op when cached)
#   scripts/testservers.sh start DIR [WHICH]     start the servers (or WHICH=gitea|minio|registry|flux|argocd), write DIR/env
#   scripts/testservers.sh stop DIR              stop every server started in DIR (by PID)
#   scripts/testservers.sh stop-one NAME DIR     stop gitea|minio|registry, keep data and port
#   scripts/testservers.sh start-one NAME DIR    restart gitea|minio|registry on the same port/data
#   scripts/testservers.sh status DIR            print which servers are running
#   scripts/testservers.sh paths                 print the cached binary paths
#   scripts/testservers.sh with [--flux] [--argocd] CMD [ARG...]
#                                                build, start all (and Flux, Argo CD) in a fresh DIR,
#                                                run CMD with DIR/env exported, stop them whatever happens
#
# The Flux stack is built and started with `all` only when RENDER_TESTSERVERS_FLUX=1
# (or `with --flux`), so tests that do not need it do not pay for it. Argo CD
# likewise only with RENDER_TESTSERVERS_ARGOCD=1 (or `with --argocd`); it runs
# on the Flux stack's API server, so it brings that stack with it.
#
# Besides the servers, the oras CLI is built the same way: tests pull what
# render pushed to the registry with it, as a real consumer would.
#
# RENDER_TEST_REGISTRY_DELETE=false at `start` writes a registry config with
# storage.delete.enabled false: a registry that refuses DELETE, for tests.
#
# DIR/env contains `export` lines (see write_env) that internal/testinfra/testenv reads.
# With CI=true every failure is fatal and reported with a clear message (it is
# fatal locally too; CI just gets the extra banner).
set -euo pipefail

GITEA_VERSION="v1.26.0"
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
REGISTRY_VERSION="v3.1.2" # github.com/distribution/distribution/v3/cmd/registry
ORAS_VERSION="v1.3.6"     # oras.land/oras/cmd/oras
# The Flux stack (only started on request, see FLUX below): a real API server
# with its etcd, and Flux's source- and kustomize-controllers as processes.
KUBE_VERSION="v1.36.3"          # k8s.io/kubernetes, for ./cmd/kube-apiserver
KUBE_STAGING_VERSION="v0.36.3"  # published k8s.io/* modules its ./staging replaces point at
ETCD_VERSION="v3.6.8"
# source-controller v1.9.4 to v1.9.6 need github.com/fluxcd/pkg/artifact v0.18.2
# or v0.18.3, whose module zips the proxy here refuses (403, "not available");
# v1.9.3 (artifact v0.18.1) is the newest whose dependencies all download.
SOURCE_CONTROLLER_VERSION="v1.9.3"
KUSTOMIZE_CONTROLLER_VERSION="v1.9.5"
# Argo CD (only started on request, see ARGOCD below). v3.2.5 builds with Go
# 1.26 and has OCI sources; its go.mod's replaces all name published modules,
# so it builds in a writable copy of its module (v3.4 and later replace
# gitops-engine with a folder their module zip lacks).
ARGOCD_VERSION="v3.2.5"

GITEA_USER="render-admin"
GITEA_PASSWORD="render-admin-pw-1"
GITEA_EMAIL="render-admin@example.invalid"
MINIO_ACCESS_KEY="render-minio"
MINIO_SECRET_KEY="render-minio-secret-1"
REGISTRY_USER="render-registry"
REGISTRY_PASSWORD="render-registry-pw-1"
# bcrypt of REGISTRY_PASSWORD (the registry's htpasswd file wants a hash), at
# bcrypt's lowest cost: the registry checks it on every request, and at the
# default cost that check alone made each render wait seconds on 2 cores.
REGISTRY_PASSWORD_BCRYPT='$2a$04$9GBpoHZTSBvFSipv820WS.1BHoXkJ9hHtGK4jxp76c91Vc0TSOz/K'

CACHE_DIR="${RENDER_CACHE_DIR:-${HOME}/.cache/render}"
BIN_DIR="${CACHE_DIR}/bin"
GITEA_BIN="${BIN_DIR}/gitea-${GITEA_VERSION}"
MINIO_BIN="${BIN_DIR}/minio-${MINIO_VERSION}"
# -fs: the build below (filesystem driver only), not upstream cmd/registry.
REGISTRY_BIN="${BIN_DIR}/registry-${REGISTRY_VERSION}-fs"
ORAS_BIN="${BIN_DIR}/oras-${ORAS_VERSION}"
ETCD_BIN="${BIN_DIR}/etcd-${ETCD_VERSION}"
APISERVER_BIN="${BIN_DIR}/kube-apiserver-${KUBE_VERSION}"
SOURCE_CONTROLLER_BIN="${BIN_DIR}/source-controller-${SOURCE_CONTROLLER_VERSION}"
KUSTOMIZE_CONTROLLER_BIN="${BIN_DIR}/kustomize-controller-${KUSTOMIZE_CONTROLLER_VERSION}"
# The controllers' CRDs, copied from their modules' config/crd/bases.
FLUX_CRDS_DIR="${BIN_DIR}/flux-crds-${SOURCE_CONTROLLER_VERSION}-${KUSTOMIZE_CONTROLLER_VERSION}"
# Argo CD's one binary picks its role from its name, so its folder holds
# argocd, the links argocd-repo-server and argocd-application-controller to
# it, and manifests/ (the CRDs and config objects copied from its module).
ARGOCD_DIR="${BIN_DIR}/argocd-${ARGOCD_VERSION}"
ARGOCD_BIN="${ARGOCD_DIR}/argocd"
SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"

START_TIMEOUT="${RENDER_TESTSERVERS_START_TIMEOUT:-90}" # seconds per server
STOP_TIMEOUT="${RENDER_TESTSERVERS_STOP_TIMEOUT:-15}"   # seconds before SIGKILL

log() { printf '[testservers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	if [[ "${CI:-}" == "true" ]]; then
		printf '\n::error::testservers.sh: %s\n' "$*" >&2
	fi
	printf '[testservers] FATAL: %s\n' "$*" >&2
	exit 1
}

need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || die "required command '$c' not found in PATH"
	done
}

# ---------------------------------------------------------------- build

build_gitea() {
	if [[ -x "$GITEA_BIN" ]]; then
		log "gitea ${GITEA_VERSION}: cached at ${GITEA_BIN}"
		return 0
	fi
	need go git
	command -v "${CC:-gcc}" >/dev/null 2>&1 || command -v cc >/dev/null 2>&1 ||
		die "gitea needs a C compiler (CGO, sqlite); install gcc"
	local t0=$SECONDS work moddir tmpbin
	work="$(mktemp -d "${CACHE_DIR}/tmp/gitea-build.XXXXXX")"
	tmpbin="${BIN_DIR}/.gitea-${GITEA_VERSION}.tmp.$$"
	# shellcheck disable=SC2064
	trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work' '$tmpbin'" EXIT
	log "gitea ${GITEA_VERSION}: downloading module source"
	local dl
	dl="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "code.gitea.io/gitea@${GITEA_VERSION}" 2>&1)" ||
		die "gitea ${GITEA_VERSION}: go mod download failed: $dl"
	moddir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$dl")"
	[[ -n "$moddir" && -d "$moddir" ]] || die "gitea ${GITEA_VERSION}: go mod download gave no module dir: $dl"
	cp -R "$moddir" "$work/src"
	chmod -R u+w "$work/src"
	(
		cd "$work/src" || exit 1
		export CGO_ENABLED=1 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
		local d
		for d in modules/options modules/public modules/templates modules/migration; do
			if [[ -d "$d" ]] && grep -qs 'go:generate' "$d"/*_bindata.go; then
				log "gitea ${GITEA_VERSION}: go generate -tags bindata ./$d"
				(cd "$d" && go generate -tags bindata) >&2 || exit 1
			fi
		done
		log "gitea ${GITEA_VERSION}: go build (cgo, sqlite; several minutes)"
		go build -trimpath -tags 'bindata sqlite sqlite_unlock_notify' \
			-ldflags "-s -w -X main.Version=${GITEA_VERSION#v} -X 'main.Tags=bindata sqlite sqlite_unlock_notify'" \
			-o "$tmpbin" . >&2
	) || die "gitea ${GITEA_VERSION}: build failed (see output above)"
	"$tmpbin" --version >/dev/null || die "gitea ${GITEA_VERSION}: built binary does not run"
	mv -f "$tmpbin" "$GITEA_BIN"
	log "gitea ${GITEA_VERSION}: built in $((SECONDS - t0))s -> ${GITEA_BIN}"
}

build_minio() {
	if [[ -x "$MINIO_BIN" ]]; then
		log "minio ${MINIO_VERSION}: cached at ${MINIO_BIN}"
		return 0
	fi
	need go
	local t0=$SECONDS gobin tmpbin
	gobin="$(mktemp -d "${CACHE_DIR}/tmp/minio-build.XXXXXX")"
	tmpbin="${BIN_DIR}/.minio-${MINIO_VERSION}.tmp.$$"
	# shellcheck disable=SC2064
	trap "rm -rf '$gobin' '$tmpbin'" EXIT
	log "minio ${MINIO_VERSION}: go install (several minutes)"
	(
		cd "$gobin" || exit 1
		export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOBIN="$gobin"
		go install -trimpath -ldflags "-s -w" "github.com/minio/minio@${MINIO_VERSION}" >&2
	) || die "minio ${MINIO_VERSION}: go install failed (see output above)"
	[[ -x "$gobin/minio" ]] || die "minio ${MINIO_VERSION}: go install produced no binary"
	mv -f "$gobin/minio" "$tmpbin"
	"$tmpbin" --version >/dev/null || die "minio ${MINIO_VERSION}: built binary does not run"
	mv -f "$tmpbin" "$MINIO_BIN"
	log "minio ${MINIO_VERSION}: built in $((SECONDS - t0))s -> ${MINIO_BIN}"
}

# go_install NAME VERSION PACKAGE BIN VERSION-ARGS...: go install PACKAGE@VERSION
# (static, from the module proxy) and cache it as BIN; the built binary must
# run with VERSION-ARGS.
go_install() {
	local name=$1 version=$2 pkg=$3 bin=$4 base
	shift 4
	if [[ -x "$bin" ]]; then
		log "$name ${version}: cached at ${bin}"
		return 0
	fi
	need go
	local t0=$SECONDS gobin tmpbin
	base="$(basename "$pkg")"
	gobin="$(mktemp -d "${CACHE_DIR}/tmp/${name}-build.XXXXXX")"
	tmpbin="${BIN_DIR}/.${name}-${version}.tmp.$$"
	# shellcheck disable=SC2064
	trap "rm -rf '$gobin' '$tmpbin'" EXIT
	log "$name ${version}: go install ${pkg}"
	(
		cd "$gobin" || exit 1
		export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOBIN="$gobin"
		go install -trimpath -ldflags "-s -w" "${pkg}@${version}" >&2
	) || die "$name ${version}: go install failed (see output above)"
	[[ -x "$gobin/$base" ]] || die "$name ${version}: go install produced no binary"
	mv -f "$gobin/$base" "$tmpbin"
	"$tmpbin" "$@" >/dev/null || die "$name ${version}: built binary does not run"
	mv -f "$tmpbin" "$bin"
	log "$name ${version}: built in $((SECONDS - t0))s -> ${bin}"
}

# build_registry: distribution's registry with only what the tests use (the
# filesystem storage driver and htpasswd auth). Its own cmd/registry links
# every storage driver (Azure, GCS, S3, CloudFront): 1.2 GB of modules and
# most of its compile time, for drivers no test starts. The main package
# below is the upstream one with those imports left out.
build_registry() {
	if [[ -x "$REGISTRY_BIN" ]]; then
		log "registry ${REGISTRY_VERSION}: cached at ${REGISTRY_BIN}"
		return 0
	fi
	need go
	local t0=$SECONDS work tmpbin
	work="$(mktemp -d "${CACHE_DIR}/tmp/registry-build.XXXXXX")"
	tmpbin="${BIN_DIR}/.registry-${REGISTRY_VERSION}.tmp.$$"
	# shellcheck disable=SC2064
	trap "rm -rf '$work' '$tmpbin'" EXIT
	cat >"$work/go.mod" <<EOM
module render.test/registry

go 1.26

require github.com/distribution/distribution/v3 ${REGISTRY_VERSION}
EOM
	cat >"$work/main.go" <<'EOM'
// The registry of distribution/distribution with the filesystem driver and
// htpasswd auth only: what render's tests run.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() { _ = registry.RootCmd.Execute() }
EOM
	log "registry ${REGISTRY_VERSION}: go build (filesystem driver and htpasswd only)"
	(
		cd "$work" || exit 1
		export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod" GOTOOLCHAIN=local GOWORK=off
		go mod tidy >&2 && go build -trimpath -ldflags "-s -w" -o "$tmpbin" . >&2
	) || die "registry ${REGISTRY_VERSION}: build failed (see output above)"
	"$tmpbin" --version >/dev/null || die "registry ${REGISTRY_VERSION}: built binary does not run"
	mv -f "$tmpbin" "$REGISTRY_BIN"
	log "registry ${REGISTRY_VERSION}: built in $((SECONDS - t0))s -> ${REGISTRY_BIN}"
}

build_oras() {
	go_install oras "$ORAS_VERSION" oras.land/oras/cmd/oras "$ORAS_BIN" version
}

# build_go_module NAME MODULE VERSION PKG BIN FIXUP [LDFLAGS]: build PKG of
# MODULE@VERSION into BIN in a writable copy of the module, after FIXUP (a
# function run in the copy) has repointed go.mod's local replaces at published
# modules; LDFLAGS are added to -s -w. The default GOMODCACHE/GOCACHE are
# shared, so common k8s modules compile once.
build_go_module() {
	local name=$1 module=$2 version=$3 pkg=$4 bin=$5 fixup=$6 ldflags=${7:-}
	if [[ -x "$bin" ]]; then
		log "$name ${version}: cached at ${bin}"
		return 0
	fi
	need go
	local t0=$SECONDS work moddir dl tmpbin
	work="$(mktemp -d "${CACHE_DIR}/tmp/${name}-build.XXXXXX")"
	tmpbin="${BIN_DIR}/.${name}-${version}.tmp.$$"
	# shellcheck disable=SC2064
	trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work' '$tmpbin'" EXIT
	log "$name ${version}: downloading ${module}@${version}"
	dl="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "${module}@${version}" 2>&1)" ||
		die "$name ${version}: go mod download failed: $dl"
	moddir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$dl")"
	[[ -n "$moddir" && -d "$moddir" ]] || die "$name ${version}: go mod download gave no module dir: $dl"
	cp -R "$moddir" "$work/src"
	chmod -R u+w "$work/src"
	(
		cd "$work/src" || exit 1
		export CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=mod" GOTOOLCHAIN=local GOWORK=off
		"$fixup" || exit 1
		log "$name ${version}: go build ./${pkg#./} (several minutes)"
		nice -n 10 go build -trimpath -ldflags "-s -w${ldflags:+ $ldflags}" -o "$tmpbin" "$pkg" >&2
	) || die "$name ${version}: build failed (see output above)"
	"$tmpbin" --help >/dev/null 2>&1 || die "$name ${version}: built binary does not run"
	mv -f "$tmpbin" "$bin"
	log "$name ${version}: built in $((SECONDS - t0))s -> ${bin}"
}

# drop_local_replaces: remove go.mod replaces that point inside the module's
# repository (../api, ./api): the module zip lacks those folders, and the
# require lines already name the published versions.
drop_local_replaces() {
	local m
	for m in $(awk '$0 ~ /=> \.\.?\// { if ($1 == "replace") print $2; else print $1 }' go.mod); do
		go mod edit -dropreplace="$m"
	done
}

# kube_fixup: k8s.io/kubernetes replaces k8s.io/* with ./staging folders its
# module zip lacks; point them at the published modules of the same release.
kube_fixup() {
	local m
	rm -rf vendor go.work go.work.sum
	for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' go.mod); do
		go mod edit -replace="${m}=${m}@${KUBE_STAGING_VERSION}"
	done
	if grep -q '=> \./' go.mod; then
		log "kube-apiserver: go.mod still has local replaces:"
		grep '=> \./' go.mod >&2
		return 1
	fi
}

build_etcd() {
	build_go_module etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" . "$ETCD_BIN" drop_local_replaces
}

build_apiserver() {
	build_go_module kube-apiserver k8s.io/kubernetes "$KUBE_VERSION" ./cmd/kube-apiserver "$APISERVER_BIN" kube_fixup
}

build_source_controller() {
	build_go_module source-controller github.com/fluxcd/source-controller "$SOURCE_CONTROLLER_VERSION" . \
		"$SOURCE_CONTROLLER_BIN" drop_local_replaces
}

build_kustomize_controller() {
	build_go_module kustomize-controller github.com/fluxcd/kustomize-controller "$KUSTOMIZE_CONTROLLER_VERSION" . \
		"$KUSTOMIZE_CONTROLLER_BIN" drop_local_replaces
}

# copy_flux_crds: the CRDs of the two controllers, one file per CRD.
copy_flux_crds() {
	[[ -d "$FLUX_CRDS_DIR" ]] && return 0
	local tmp m v dl dir
	tmp="${FLUX_CRDS_DIR}.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	for m in "github.com/fluxcd/source-controller@${SOURCE_CONTROLLER_VERSION}" \
		"github.com/fluxcd/kustomize-controller@${KUSTOMIZE_CONTROLLER_VERSION}"; do
		dl="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$m" 2>&1)" ||
			die "flux CRDs: go mod download $m failed: $dl"
		dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$dl")"
		[[ -d "$dir/config/crd/bases" ]] || die "flux CRDs: $m has no config/crd/bases"
		cp "$dir"/config/crd/bases/*.yaml "$tmp/"
	done
	chmod -R u+w "$tmp"
	mv "$tmp" "$FLUX_CRDS_DIR"
	v="$(find "$FLUX_CRDS_DIR" -name '*.yaml' | wc -l)"
	log "flux CRDs: $v files in $FLUX_CRDS_DIR"
}

flux_built() {
	[[ -x "$ETCD_BIN" && -x "$APISERVER_BIN" && -x "$SOURCE_CONTROLLER_BIN" &&
		-x "$KUSTOMIZE_CONTROLLER_BIN" && -d "$FLUX_CRDS_DIR" ]]
}

# nothing: build_go_module's FIXUP for a module whose go.mod needs none.
nothing() { :; }

# build_argocd: the one argocd binary (./cmd, every component), then the
# links that make it the repo server and the application controller.
build_argocd() {
	mkdir -p "$ARGOCD_DIR"
	build_go_module argocd github.com/argoproj/argo-cd/v3 "$ARGOCD_VERSION" ./cmd "$ARGOCD_BIN" nothing \
		"-X github.com/argoproj/argo-cd/v3/common.version=${ARGOCD_VERSION#v}"
	ln -sfn argocd "$ARGOCD_DIR/argocd-repo-server"
	ln -sfn argocd "$ARGOCD_DIR/argocd-application-controller"
}

# copy_argocd_manifests: what the test cluster needs from the module's
# manifests/: the Application and AppProject CRDs, and the argocd-cm,
# argocd-rbac-cm and argocd-secret objects of the base install.
copy_argocd_manifests() {
	[[ -d "$ARGOCD_DIR/manifests" ]] && return 0
	local tmp dl dir f
	tmp="$ARGOCD_DIR/.manifests.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	dl="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/argoproj/argo-cd/v3@${ARGOCD_VERSION}" 2>&1)" ||
		die "argocd manifests: go mod download failed: $dl"
	dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$dl")"
	for f in crds/application-crd.yaml crds/appproject-crd.yaml base/config/argocd-cm.yaml \
		base/config/argocd-rbac-cm.yaml base/config/argocd-secret.yaml; do
		[[ -f "$dir/manifests/$f" ]] || die "argocd manifests: the module has no manifests/$f"
		cp "$dir/manifests/$f" "$tmp/"
	done
	chmod -R u+w "$tmp"
	mv "$tmp" "$ARGOCD_DIR/manifests"
	log "argocd manifests: copied to $ARGOCD_DIR/manifests"
}

# ensure_redis: Argo CD's cache is Redis, Debian's redis-server package. CI
# machines may have nothing installed by hand, so install it when missing
# (as root, or with sudo that asks no password).
ensure_redis() {
	command -v redis-server >/dev/null 2>&1 && return 0
	command -v apt-get >/dev/null 2>&1 || die "argocd needs redis-server, and there is no apt-get to install it: install Redis"
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		sudo -n true 2>/dev/null || die "argocd needs redis-server: run 'sudo apt-get install redis-server'"
		sudo=(sudo -n)
	fi
	log "redis-server: apt-get install redis-server"
	# (Where services may start, the package also starts Debian's own Redis
	# service on port 6379; the tests start theirs on a free port.)
	{ "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends redis-server; } >&2 || die "apt-get install redis-server failed"
	command -v redis-server >/dev/null 2>&1 || die "apt-get installed no redis-server"
}

argocd_built() {
	[[ -x "$ARGOCD_BIN" && -L "$ARGOCD_DIR/argocd-repo-server" && -L "$ARGOCD_DIR/argocd-application-controller" &&
		-d "$ARGOCD_DIR/manifests" ]] && command -v redis-server >/dev/null 2>&1
}

# want_argocd: Argo CD is wanted (RENDER_TESTSERVERS_ARGOCD=1 or `--argocd`).
want_argocd() { [[ "${RENDER_TESTSERVERS_ARGOCD:-0}" == 1 ]]; }

# want_flux: the Flux stack is wanted (RENDER_TESTSERVERS_FLUX=1 or `--flux`);
# Argo CD runs on its API server, so wanting Argo CD wants it too.
want_flux() { [[ "${RENDER_TESTSERVERS_FLUX:-0}" == 1 ]] || want_argocd; }

all_built() {
	[[ -x "$GITEA_BIN" && -x "$MINIO_BIN" && -x "$REGISTRY_BIN" && -x "$ORAS_BIN" ]] || return 1
	if want_argocd; then
		argocd_built || return 1
	fi
	want_flux || return 0
	flux_built
}

cmd_build() {
	mkdir -p "$BIN_DIR" "${CACHE_DIR}/tmp"
	if all_built; then
		log "binaries cached in ${BIN_DIR}"
		return 0
	fi
	# Serialise concurrent builds (parallel CI jobs / make targets sharing a cache).
	if command -v flock >/dev/null 2>&1; then
		exec 9>"${BIN_DIR}/.build.lock"
		flock 9
	fi
	if all_built; then
		exec 9>&-
		log "binaries were built by a concurrent run; cached in ${BIN_DIR}"
		return 0
	fi
	# We hold the lock: leftovers from interrupted builds are garbage.
	chmod -R u+w "${CACHE_DIR}/tmp" 2>/dev/null || true
	rm -rf "${CACHE_DIR}/tmp/"*-build.* "${BIN_DIR}/".*.tmp.* "${BIN_DIR}/"flux-crds-*.tmp.* "$ARGOCD_DIR/".*.tmp.*
	local t0=$SECONDS
	# Sequential builds: measured cold on 2 cores, gitea then minio took 564s
	# vs 665s for both in parallel (go build already uses every core).
	# registry then oras, cold (empty module and build caches, 1.2 GB of
	# modules for the registry's storage drivers): 526 CPU-seconds (396 user,
	# 130 system), 29.5 min wall at nice 10 on a machine shared by 4 agents.
	# Each build runs as a background job (not `( ) ||`, which would disable
	# set -e inside it) so that its EXIT trap removes its temp files.
	local rc=0 b builds=(build_gitea build_minio build_registry build_oras)
	if want_flux; then
		# source- and kustomize-controller share most modules (same k8s.io,
		# controller-runtime): built one after the other, the second reuses
		# the first one's compiled packages.
		builds+=(build_etcd build_apiserver build_source_controller build_kustomize_controller)
	fi
	if want_argocd; then
		# argocd (./cmd, every component in one binary), measured on 2
		# shared cores: 670 CPU-seconds (541 user, 129 system) with an
		# empty build cache, 474 after the Flux stack's builds; 230 MB of
		# module zips.
		builds+=(ensure_redis build_argocd copy_argocd_manifests)
	fi
	for b in "${builds[@]}"; do
		"$b" &
		wait $! || { rc=1; break; }
	done
	if [[ $rc -eq 0 ]] && want_flux; then
		copy_flux_crds &
		wait $! || rc=1
	fi
	exec 9>&- # release the lock; do not leak the fd into servers started later
	[[ $rc -eq 0 ]] || die "building test servers failed"
	log "build finished in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- helpers

abs_dir() {
	mkdir -p "$1"
	(cd "$1" && pwd)
}

port_in_use() {
	# Something accepts connections on 127.0.0.1:$1?
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

free_port() {
	# Prefer ports below the kernel's ephemeral range, so that a port released
	# by stop-one is not grabbed by some outgoing connection before start-one.
	local p i lo=20000 hi=60000 eph
	eph="$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true)"
	if [[ "$eph" =~ ^[0-9]+$ ]] && ((eph > lo + 2000)); then
		hi=$eph
	fi
	for i in $(seq 1 200); do
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "could not find a free loopback port"
}

http_ok() { # url -> 0 if HTTP 2xx
	if command -v curl >/dev/null 2>&1; then
		curl -fsS -o /dev/null --max-time 3 "$1" 2>/dev/null
	else
		local hostport path host port status
		hostport="${1#http://}"
		path="/${hostport#*/}"
		hostport="${hostport%%/*}"
		host="${hostport%:*}"
		port="${hostport##*:}"
		status="$(
			exec 3<>"/dev/tcp/${host}/${port}" || exit 1
			printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$hostport" >&3
			head -n1 <&3
		)" 2>/dev/null || return 1
		[[ "$status" =~ ^HTTP/[0-9.]+\ 2 ]]
	fi
}

# pid_alive PIDFILE BINARY DIR: the pid in PIDFILE is running BINARY with DIR
# in its arguments or environment (guards against PID reuse: we never signal anything else).
pid_alive() {
	local pidfile=$1 bin=$2 dir=$3 pid exe
	[[ -s "$pidfile" ]] || return 1
	pid="$(<"$pidfile")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -d "/proc/$pid" ]] || return 1
	exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
	exe="${exe% (deleted)}"
	[[ "$exe" == "$(readlink -f "$bin")" ]] || return 1
	# DIR is in its arguments, or (kustomize-controller, which takes no path
	# argument) in its environment (KUBECONFIG=DIR/flux/kubeconfig).
	{ { tr '\0' '\n' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF -- "$dir" ||
		{ tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qF -- "$dir"; } || return 1
	# zombies are as good as dead
	[[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]]
}

# proc_running PIDFILE: the launched process has not exited (it may still be
# exec'ing from setsid/env into the server binary).
proc_running() {
	local pid
	pid="$(<"$1")"
	[[ -d "/proc/$pid" && "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ]]
}

stop_pid() { # NAME PIDFILE BINARY DIR
	local name=$1 pidfile=$2 bin=$3 dir=$4 pid i
	if ! pid_alive "$pidfile" "$bin" "$dir"; then
		rm -f "$pidfile"
		return 0
	fi
	pid="$(<"$pidfile")"
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		pid_alive "$pidfile" "$bin" "$dir" || break
		sleep 0.1
	done
	if pid_alive "$pidfile" "$bin" "$dir"; then
		log "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			pid_alive "$pidfile" "$bin" "$dir" || break
			sleep 0.1
		done
	fi
	# Only our own pid file: a start that ran meanwhile wrote its own.
	[[ "$(cat "$pidfile" 2>/dev/null)" != "$pid" ]] || rm -f "$pidfile"
}

# stop_launched NAME PIDFILE: stop a process this shell just launched (it is
# our child, so its PID cannot have been reused; it may not have exec'd into
# the server binary yet, so pid_alive's checks would not recognise it).
stop_launched() {
	local name=$1 pidfile=$2 pid i
	[[ -s "$pidfile" ]] || return 0
	pid="$(<"$pidfile")"
	if proc_running "$pidfile"; then
		log "stopping $name (pid $pid) after failed start"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
			proc_running "$pidfile" || break
			sleep 0.1
		done
		proc_running "$pidfile" && kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null || true
	rm -f "$pidfile"
}

# launch PIDFILE LOGFILE CMD... : start CMD detached in its own session.
launch() {
	local pidfile=$1 logfile=$2
	shift 2
	# setsid (without -f) execs in place, so $! is the server's own PID.
	setsid "$@" </dev/null >>"$logfile" 2>&1 &
	echo $! >"$pidfile"
}

# ---------------------------------------------------------------- gitea

gitea_env() { # DIR -> runs remaining args with a sandboxed environment
	local dir=$1
	shift
	env HOME="$dir/gitea/home" \
		USER="$(id -un)" \
		GITEA_WORK_DIR="$dir/gitea" \
		GITEA_CUSTOM="$dir/gitea/custom" \
		GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true \
		GIT_CONFIG_NOSYSTEM=1 \
		"$@"
}

gitea_write_ini() { # DIR PORT
	local dir=$1 port=$2 g="$1/gitea" secret token
	mkdir -p "$g"/{custom/conf,data,repos,log,home,tmp}
	[[ -s "$g/secret-key" ]] || gitea_env "$dir" "$GITEA_BIN" generate secret SECRET_KEY >"$g/secret-key"
	[[ -s "$g/internal-token" ]] || gitea_env "$dir" "$GITEA_BIN" generate secret INTERNAL_TOKEN >"$g/internal-token"
	secret="$(<"$g/secret-key")"
	token="$(<"$g/internal-token")"
	cat >"$g/custom/conf/app.ini" <<EOF
; Throwaway Gitea config written by scripts/testservers.sh
APP_NAME = render-test
RUN_USER = $(id -un)
RUN_MODE = prod
WORK_PATH = $g
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = $port
DOMAIN = 127.0.0.1
ROOT_URL = http://127.0.0.1:$port/
LOCAL_ROOT_URL = http://127.0.0.1:$port/
APP_DATA_PATH = $g/data
DISABLE_SSH = true
START_SSH_SERVER = false
SSH_PORT = 0
OFFLINE_MODE = true
LFS_START_SERVER = false
ENABLE_GZIP = false
GRACEFUL_HAMMER_TIME = 3s
LANDING_PAGE = explore

[database]
DB_TYPE = sqlite3
PATH = $g/data/gitea.db
SQLITE_JOURNAL_MODE = WAL
LOG_SQL = false

[repository]
ROOT = $g/repos
DEFAULT_BRANCH = main
DEFAULT_PRIVATE = last
ENABLE_PUSH_CREATE_USER = true
ENABLE_PUSH_CREATE_ORG = true
DISABLE_HTTP_GIT = false
DISABLE_MIGRATIONS = false

[repository.local]
LOCAL_COPY_PATH = $g/tmp/local-repo

[repository.upload]
TEMP_PATH = $g/tmp/uploads

[git]
HOME_PATH = $g/home

[security]
INSTALL_LOCK = true
SECRET_KEY = $secret
INTERNAL_TOKEN = $token
PASSWORD_COMPLEXITY = off
MIN_PASSWORD_LENGTH = 6
PASSWORD_CHECK_PWN = false
LOGIN_REMEMBER_DAYS = 1

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
REGISTER_EMAIL_CONFIRM = false
ENABLE_NOTIFY_MAIL = false
ENABLE_CAPTCHA = false
ENABLE_BASIC_AUTHENTICATION = true
DEFAULT_ALLOW_CREATE_ORGANIZATION = true
DEFAULT_KEEP_EMAIL_PRIVATE = false
NO_REPLY_ADDRESS = noreply.example.invalid

[mailer]
ENABLED = false

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[queue]
TYPE = level
DATADIR = $g/data/queues

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[lfs]
PATH = $g/data/lfs

[api]
ENABLE_SWAGGER = false

[webhook]
ALLOWED_HOST_LIST = loopback
SKIP_TLS_VERIFY = true

[migrations]
ALLOW_LOCALNETWORKS = true

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[other]
SHOW_FOOTER_VERSION = false

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = $g/log
logger.router.MODE =
logger.access.MODE =
EOF
	echo "$port" >"$g/port"
}

gitea_ini() { echo "$1/gitea/custom/conf/app.ini"; }

gitea_launch() { # DIR : start web server on the port recorded in DIR/gitea/port
	local dir=$1 port i pidfile="$1/gitea.pid"
	port="$(<"$dir/gitea/port")"
	if pid_alive "$pidfile" "$GITEA_BIN" "$dir"; then
		log "gitea already running (pid $(<"$pidfile"))"
		return 0
	fi
	port_in_use "$port" && return 2
	launch "$pidfile" "$dir/gitea/log/stdout.log" \
		env HOME="$dir/gitea/home" USER="$(id -un)" GITEA_WORK_DIR="$dir/gitea" \
		GITEA_CUSTOM="$dir/gitea/custom" GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true \
		GIT_CONFIG_NOSYSTEM=1 \
		"$GITEA_BIN" web --config "$(gitea_ini "$dir")" --work-path "$dir/gitea" \
		--custom-path "$dir/gitea/custom"
	for ((i = 0; i < START_TIMEOUT * 5; i++)); do
		if http_ok "http://127.0.0.1:$port/api/healthz"; then
			log "gitea up on 127.0.0.1:$port (pid $(<"$pidfile"))"
			return 0
		fi
		proc_running "$pidfile" || break
		sleep 0.2
	done
	# Failed: bind race (try another port) or real failure.
	stop_launched gitea "$pidfile"
	log "gitea failed to come up on port $port; last log lines:"
	tail -n 20 "$dir/gitea/log/stdout.log" >&2 || true
	tail -n 20 "$dir/gitea/log/gitea.log" >&2 2>/dev/null || true
	return 1
}

gitea_first_start() { # DIR
	local dir=$1 attempt rc ini port setuplog="$1/gitea/log/setup.log"
	ini="$(gitea_ini "$dir")"
	port="$(free_port)"
	gitea_write_ini "$dir" "$port"
	# Schema + admin user are created offline (before `web`), so nothing else
	# touches the SQLite database concurrently.
	gitea_env "$dir" "$GITEA_BIN" migrate --config "$ini" --work-path "$dir/gitea" \
		>>"$setuplog" 2>&1 || die "gitea migrate failed (see $setuplog)"
	gitea_env "$dir" "$GITEA_BIN" admin user create --config "$ini" --work-path "$dir/gitea" \
		--admin --username "$GITEA_USER" --password "$GITEA_PASSWORD" --email "$GITEA_EMAIL" \
		--must-change-password=false >>"$setuplog" 2>&1 ||
		die "gitea admin user create failed (see $setuplog)"
	# CLI commands log to stdout too: keep only the token line.
	gitea_env "$dir" "$GITEA_BIN" admin user generate-access-token --config "$ini" \
		--work-path "$dir/gitea" --username "$GITEA_USER" --token-name render-test \
		--scopes all --raw >"$dir/gitea/admin-token.out" 2>>"$setuplog" ||
		die "gitea generate-access-token failed (see $setuplog)"
	grep -E '^[0-9a-f]{40}$' "$dir/gitea/admin-token.out" | tail -n 1 >"$dir/gitea/admin-token" ||
		die "gitea generate-access-token printed no token (see $dir/gitea/admin-token.out)"
	cat "$dir/gitea/admin-token.out" >>"$setuplog"
	rm -f "$dir/gitea/admin-token.out"
	for attempt in 1 2 3 4 5; do
		rc=0
		gitea_launch "$dir" || rc=$?
		[[ $rc -eq 0 ]] && return 0
		[[ $attempt -lt 5 ]] || die "gitea did not start (logs: $dir/gitea/log)"
		log "retrying gitea on another port"
		port="$(free_port)"
		gitea_write_ini "$dir" "$port"
	done
}

# ---------------------------------------------------------------- minio

minio_launch() { # DIR
	local dir=$1 port cport i pidfile="$1/minio.pid"
	port="$(<"$dir/minio/port")"
	cport="$(<"$dir/minio/console-port")"
	if pid_alive "$pidfile" "$MINIO_BIN" "$dir"; then
		log "minio already running (pid $(<"$pidfile"))"
		return 0
	fi
	{ port_in_use "$port" || port_in_use "$cport"; } && return 2
	mkdir -p "$dir/minio/data" "$dir/minio/home" "$dir/minio/certs"
	launch "$pidfile" "$dir/minio/minio.log" \
		env HOME="$dir/minio/home" MINIO_ROOT_USER="$MINIO_ACCESS_KEY" \
		MINIO_ROOT_PASSWORD="$MINIO_SECRET_KEY" MINIO_UPDATE=off MINIO_CI_CD=1 \
		MINIO_BROWSER=off \
		"$MINIO_BIN" server --quiet --anonymous --certs-dir "$dir/minio/certs" \
		--address "127.0.0.1:$port" --console-address "127.0.0.1:$cport" "$dir/minio/data"
	for ((i = 0; i < START_TIMEOUT * 5; i++)); do
		if http_ok "http://127.0.0.1:$port/minio/health/live" &&
			http_ok "http://127.0.0.1:$port/minio/health/ready"; then
			log "minio up on 127.0.0.1:$port (pid $(<"$pidfile"))"
			return 0
		fi
		proc_running "$pidfile" || break
		sleep 0.2
	done
	stop_launched minio "$pidfile"
	log "minio failed to come up on port $port; last log lines:"
	tail -n 20 "$dir/minio/minio.log" >&2 || true
	return 1
}

minio_first_start() { # DIR
	local dir=$1 attempt rc
	mkdir -p "$dir/minio"
	for attempt in 1 2 3 4 5; do
		free_port >"$dir/minio/port"
		free_port >"$dir/minio/console-port"
		rc=0
		minio_launch "$dir" || rc=$?
		[[ $rc -eq 0 ]] && return 0
		[[ $attempt -lt 5 ]] || die "minio did not start (log: $dir/minio/minio.log)"
		log "retrying minio on other ports"
	done
}

# ---------------------------------------------------------------- registry

registry_write_config() { # DIR PORT
	local dir=$1 port=$2 r="$1/registry"
	mkdir -p "$r/data"
	printf '%s:%s\n' "$REGISTRY_USER" "$REGISTRY_PASSWORD_BCRYPT" >"$r/htpasswd"
	cat >"$r/config.yml" <<EOF2
# Throwaway registry config written by scripts/testservers.sh
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $r/data
  delete:
    enabled: ${RENDER_TEST_REGISTRY_DELETE:-true}
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$port
  secret: render-test-registry-secret
  debug:
    addr: ""
auth:
  htpasswd:
    realm: render-test
    path: $r/htpasswd
EOF2
	echo "$port" >"$r/port"
}

registry_launch() { # DIR
	local dir=$1 port i pidfile="$1/registry.pid"
	port="$(<"$dir/registry/port")"
	if pid_alive "$pidfile" "$REGISTRY_BIN" "$dir"; then
		log "registry already running (pid $(<"$pidfile"))"
		return 0
	fi
	port_in_use "$port" && return 2
	launch "$pidfile" "$dir/registry/registry.log" \
		env HOME="$dir/registry" OTEL_TRACES_EXPORTER=none \
		"$REGISTRY_BIN" serve "$dir/registry/config.yml"
	for ((i = 0; i < START_TIMEOUT * 5; i++)); do
		# /v2/ answers 401 without credentials once the registry is up.
		if curl -sS -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$port/v2/" 2>/dev/null | grep -q '^401$'; then
			log "registry up on 127.0.0.1:$port (pid $(<"$pidfile"))"
			return 0
		fi
		proc_running "$pidfile" || break
		sleep 0.2
	done
	stop_launched registry "$pidfile"
	log "registry failed to come up on port $port; last log lines:"
	tail -n 20 "$dir/registry/registry.log" >&2 || true
	return 1
}

registry_first_start() { # DIR
	local dir=$1 attempt rc
	need curl
	for attempt in 1 2 3 4 5; do
		registry_write_config "$dir" "$(free_port)"
		rc=0
		registry_launch "$dir" || rc=$?
		[[ $rc -eq 0 ]] && return 0
		[[ $attempt -lt 5 ]] || die "registry did not start (log: $dir/registry/registry.log)"
		log "retrying registry on another port"
	done
}

# ---------------------------------------------------------------- flux
#
# etcd, kube-apiserver, source-controller and kustomize-controller, as local
# processes on loopback ports. No kubelet, scheduler or controller-manager:
# objects are stored and served, nothing runs them, and a deleted namespace
# stays Terminating (the namespace controller is in the controller-manager).
# Flux's controllers reach the API server with a static token in the
# system:masters group (DIR/flux/kubeconfig); tests use the same token.

flux_pki() { # DIR: CA, serving certificate, service-account key, static token
	local f="$1/flux" pki="$1/flux/pki"
	mkdir -p "$pki"
	(
		cd "$pki" || exit 1
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 7 \
			-subj "/CN=render-test-ca" -addext basicConstraints=critical,CA:TRUE \
			-addext keyUsage=critical,keyCertSign,cRLSign
		openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
		printf '%s\n' "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc" \
			"basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
			"extendedKeyUsage=serverAuth" >apiserver.ext
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 \
			-extfile apiserver.ext -out apiserver.crt
		openssl genrsa -out sa.key 2048
		openssl rsa -in sa.key -pubout -out sa.pub
	) >>"$f/pki.log" 2>&1 || die "flux: generating certificates with openssl failed (see $f/pki.log)"
	openssl rand -hex 24 >"$f/token"
	# token,user,uid,"group"
	printf '%s,render-test,render-test,"system:masters"\n' "$(<"$f/token")" >"$pki/tokens.csv"
	chmod 600 "$pki"/*.key "$pki/tokens.csv" "$f/token"
}

flux_kubeconfig() { # DIR
	local f="$1/flux"
	cat >"$f/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: render-test
  cluster:
    server: https://127.0.0.1:$(<"$f/apiserver-port")
    certificate-authority: $f/pki/ca.crt
users:
- name: render-test
  user:
    token: $(<"$f/token")
contexts:
- name: render-test
  context: {cluster: render-test, user: render-test}
current-context: render-test
EOF
	chmod 600 "$f/kubeconfig"
}

# kube_api DIR METHOD PATH [CURL ARGS...]: a request to the API server as the
# test user; prints the body, fails on a non-2xx status.
kube_api() {
	local dir=$1 method=$2 path=$3 f="$1/flux"
	shift 3
	curl -fsS --max-time 10 --cacert "$f/pki/ca.crt" -X "$method" \
		-H "Authorization: Bearer $(<"$f/token")" "$@" \
		"https://127.0.0.1:$(<"$f/apiserver-port")$path"
}

# wait_for NAME PIDFILE LOGFILE CHECK...: wait until CHECK succeeds, or the
# process exits, or START_TIMEOUT passes.
wait_for() {
	local name=$1 pidfile=$2 logfile=$3 i
	shift 3
	for ((i = 0; i < START_TIMEOUT * 5; i++)); do
		if "$@" >/dev/null 2>&1; then
			log "$name up (pid $(<"$pidfile"))"
			return 0
		fi
		proc_running "$pidfile" || break
		sleep 0.2
	done
	stop_launched "$name" "$pidfile"
	log "$name failed to come up; last log lines:"
	tail -n 20 "$logfile" >&2 || true
	return 1
}

etcd_launch() { # DIR
	local dir=$1 f="$1/flux" cport pport
	cport="$(<"$f/etcd-port")"
	pport="$(<"$f/etcd-peer-port")"
	{ port_in_use "$cport" || port_in_use "$pport"; } && return 2
	mkdir -p "$f/etcd"
	launch "$dir/etcd.pid" "$f/etcd.log" \
		"$ETCD_BIN" --name render-test --data-dir "$f/etcd" \
		--listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "render-test=http://127.0.0.1:$pport" --log-level warn \
		--quota-backend-bytes 1073741824 --unsafe-no-fsync
	wait_for etcd "$dir/etcd.pid" "$f/etcd.log" http_ok "http://127.0.0.1:$cport/health"
}

apiserver_launch() { # DIR
	local dir=$1 f="$1/flux" port
	port="$(<"$f/apiserver-port")"
	port_in_use "$port" && return 2
	launch "$dir/kube-apiserver.pid" "$f/kube-apiserver.log" \
		"$APISERVER_BIN" --etcd-servers "http://127.0.0.1:$(<"$f/etcd-port")" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
		--cert-dir "$f/pki" --tls-cert-file "$f/pki/apiserver.crt" --tls-private-key-file "$f/pki/apiserver.key" \
		--client-ca-file "$f/pki/ca.crt" --token-auth-file "$f/pki/tokens.csv" \
		--service-account-issuer https://kubernetes.default.svc --api-audiences https://kubernetes.default.svc \
		--service-account-key-file "$f/pki/sa.pub" --service-account-signing-key-file "$f/pki/sa.key" \
		--service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC \
		--disable-admission-plugins ServiceAccount --enable-priority-and-fairness=false --profiling=false
	wait_for kube-apiserver "$dir/kube-apiserver.pid" "$f/kube-apiserver.log" kube_api "$dir" GET /readyz
}

# flux_crds DIR: install the controllers' CRDs and wait until they serve;
# create the controllers' namespace.
flux_crds() {
	local dir=$1 crd name i
	for crd in "$FLUX_CRDS_DIR"/*.yaml; do
		kube_api "$dir" POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions \
			-H 'Content-Type: application/yaml' --data-binary "@$crd" -o /dev/null ||
			die "flux: creating the CRD in $crd failed"
	done
	kube_api "$dir" POST /api/v1/namespaces -H 'Content-Type: application/json' \
		-d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"flux-system"}}' -o /dev/null ||
		die "flux: creating namespace flux-system failed"
	for crd in "$FLUX_CRDS_DIR"/*.yaml; do
		name="$(awk '$1 == "name:" { print $2; exit }' "$crd")"
		for ((i = 0; i < START_TIMEOUT * 5; i++)); do
			kube_api "$dir" GET "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$name" |
				jq -e '.status.conditions[]? | select(.type == "Established" and .status == "True")' \
					>/dev/null 2>&1 && break
			sleep 0.2
		done
		((i < START_TIMEOUT * 5)) || die "flux: CRD $name was not established within ${START_TIMEOUT}s"
	done
	log "flux CRDs established"
}

# controller_launch DIR NAME BIN ARGS...: a Flux controller as a process,
# reaching the API server through DIR/flux/kubeconfig.
controller_launch() {
	local dir=$1 name=$2 bin=$3 f="$1/flux" hport mport
	shift 3
	hport="$(<"$f/$name-health-port")"
	mport="$(<"$f/$name-metrics-port")"
	{ port_in_use "$hport" || port_in_use "$mport"; } && return 2
	mkdir -p "$f/$name"
	launch "$dir/$name.pid" "$f/$name.log" \
		env HOME="$f/$name" KUBECONFIG="$f/kubeconfig" RUNTIME_NAMESPACE=flux-system \
		"$bin" --enable-leader-election=false --watch-all-namespaces=true \
		--health-addr "127.0.0.1:$hport" --metrics-addr "127.0.0.1:$mport" --events-addr "" \
		--log-level info "$@"
	wait_for "$name" "$dir/$name.pid" "$f/$name.log" http_ok "http://127.0.0.1:$hport/readyz"
}

source_controller_launch() { # DIR
	local dir=$1 f="$1/flux" sport
	sport="$(<"$f/source-controller-storage-port")"
	port_in_use "$sport" && return 2
	mkdir -p "$f/source-controller/artifacts"
	# The storage server must advertise a loopback address: the
	# kustomize-controller downloads artifacts from the URL it advertises.
	controller_launch "$dir" source-controller "$SOURCE_CONTROLLER_BIN" \
		--storage-path "$f/source-controller/artifacts" \
		--storage-addr "127.0.0.1:$sport" --storage-adv-addr "127.0.0.1:$sport"
}

kustomize_controller_launch() { # DIR
	# A Kustomization whose dependsOn is not ready yet is looked at again
	# after --requeue-dependency (30s by default): 2s keeps the tests quick.
	controller_launch "$1" kustomize-controller "$KUSTOMIZE_CONTROLLER_BIN" --no-remote-bases=true \
		--requeue-dependency 2s
}

flux_first_start() { # DIR
	local dir=$1 f="$1/flux" p attempt rc t0=$SECONDS
	mkdir -p "$f"
	need openssl curl jq
	flux_pki "$dir"
	for p in etcd-port etcd-peer-port apiserver-port source-controller-storage-port \
		source-controller-health-port source-controller-metrics-port \
		kustomize-controller-health-port kustomize-controller-metrics-port; do
		free_port >"$f/$p"
	done
	flux_kubeconfig "$dir"
	for p in etcd apiserver flux_crds source_controller kustomize_controller; do
		if [[ $p == flux_crds ]]; then
			flux_crds "$dir"
			continue
		fi
		for attempt in 1 2 3 4 5; do
			rc=0
			"${p}_launch" "$dir" || rc=$?
			[[ $rc -eq 0 ]] && break
			[[ $attempt -lt 5 ]] || die "$p did not start (logs: $f)"
			# A port taken meanwhile (rc 2) or a bind race: new ports.
			log "retrying $p on other ports"
			case $p in
			etcd) free_port >"$f/etcd-port" && free_port >"$f/etcd-peer-port" ;;
			apiserver) free_port >"$f/apiserver-port" && flux_kubeconfig "$dir" ;;
			source_controller)
				free_port >"$f/source-controller-storage-port"
				free_port >"$f/source-controller-health-port"
				free_port >"$f/source-controller-metrics-port"
				;;
			kustomize_controller)
				free_port >"$f/kustomize-controller-health-port"
				free_port >"$f/kustomize-controller-metrics-port"
				;;
			esac
		done
	done
	log "flux stack up in $((SECONDS - t0))s"
}

flux_stop() { # DIR: controllers first, etcd last
	local dir=$1
	stop_pid kustomize-controller "$dir/kustomize-controller.pid" "$KUSTOMIZE_CONTROLLER_BIN" "$dir"
	stop_pid source-controller "$dir/source-controller.pid" "$SOURCE_CONTROLLER_BIN" "$dir"
	stop_pid kube-apiserver "$dir/kube-apiserver.pid" "$APISERVER_BIN" "$dir"
	stop_pid etcd "$dir/etcd.pid" "$ETCD_BIN" "$dir"
}

# ---------------------------------------------------------------- argocd
#
# Redis, argocd-repo-server and argocd-application-controller as local
# processes on loopback ports (the controller's metrics and health server
# binds every interface: Argo CD has no flag for its address), against the
# Flux stack's API server. No Argo CD API server, UI, Dex, ApplicationSet or
# notifications controller. Argo CD's namespace is argocd, as in its install.
#
# The in-cluster destination, https://kubernetes.default.svc, is the API
# server of DIR/flux/kubeconfig: with ARGOCD_FAKE_IN_CLUSTER=true (Argo CD's
# own setting for running it outside a cluster) the controller builds the
# in-cluster cluster's client from KUBECONFIG instead of a pod's service
# account.

ARGOCD_NAMESPACE=argocd

# argocd_objects DIR: the namespace, the Application and AppProject CRDs
# (waited on until served), argocd-cm, argocd-rbac-cm and argocd-secret as the
# install ships them, and what the Argo CD API server would add on its first
# start: server.secretkey in argocd-secret (the controller's settings are
# incomplete without it) and the AppProject default.
argocd_objects() {
	local dir=$1 m="$ARGOCD_DIR/manifests" ns=$ARGOCD_NAMESPACE crd name i key
	kube_api "$dir" POST /api/v1/namespaces -H 'Content-Type: application/json' \
		-d '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"'"$ns"'"}}' -o /dev/null ||
		die "argocd: creating namespace $ns failed"
	for crd in "$m"/application-crd.yaml "$m"/appproject-crd.yaml; do
		kube_api "$dir" POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions \
			-H 'Content-Type: application/yaml' --data-binary "@$crd" -o /dev/null ||
			die "argocd: creating the CRD in $crd failed"
	done
	kube_api "$dir" POST "/api/v1/namespaces/$ns/configmaps" -H 'Content-Type: application/yaml' \
		--data-binary "@$m/argocd-cm.yaml" -o /dev/null || die "argocd: creating argocd-cm failed"
	kube_api "$dir" POST "/api/v1/namespaces/$ns/configmaps" -H 'Content-Type: application/yaml' \
		--data-binary "@$m/argocd-rbac-cm.yaml" -o /dev/null || die "argocd: creating argocd-rbac-cm failed"
	kube_api "$dir" POST "/api/v1/namespaces/$ns/secrets" -H 'Content-Type: application/yaml' \
		--data-binary "@$m/argocd-secret.yaml" -o /dev/null || die "argocd: creating argocd-secret failed"
	key="$(openssl rand -base64 32 | tr -d '\n' | base64 -w0)"
	kube_api "$dir" PATCH "/api/v1/namespaces/$ns/secrets/argocd-secret" \
		-H 'Content-Type: application/merge-patch+json' -d '{"data":{"server.secretkey":"'"$key"'"}}' -o /dev/null ||
		die "argocd: adding server.secretkey to argocd-secret failed"
	for crd in "$m"/application-crd.yaml "$m"/appproject-crd.yaml; do
		name="$(awk '$1 == "name:" { print $2; exit }' "$crd")"
		for ((i = 0; i < START_TIMEOUT * 5; i++)); do
			kube_api "$dir" GET "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/$name" |
				jq -e '.status.conditions[]? | select(.type == "Established" and .status == "True")' \
					>/dev/null 2>&1 && break
			sleep 0.2
		done
		((i < START_TIMEOUT * 5)) || die "argocd: CRD $name was not established within ${START_TIMEOUT}s"
	done
	kube_api "$dir" POST "/apis/argoproj.io/v1alpha1/namespaces/$ns/appprojects" -H 'Content-Type: application/json' \
		-d '{"apiVersion":"argoproj.io/v1alpha1","kind":"AppProject","metadata":{"name":"default","namespace":"'"$ns"'"},
		     "spec":{"sourceRepos":["*"],"destinations":[{"server":"*","namespace":"*"}],
		             "clusterResourceWhitelist":[{"group":"*","kind":"*"}]}}' -o /dev/null ||
		die "argocd: creating AppProject default failed"
	log "argocd CRDs established, settings and AppProject default created"
}

# redis_ping PORT: Redis answers PING.
redis_ping() {
	local reply
	reply="$(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'PING\r\n' >&3
		IFS= read -r -t 3 line <&3 && printf '%s' "$line"
	)" 2>/dev/null || return 1
	[[ "$reply" == "+PONG"* ]]
}

redis_launch() { # DIR
	local dir=$1 a="$1/argocd" port
	port="$(<"$a/redis-port")"
	port_in_use "$port" && return 2
	mkdir -p "$a/redis"
	# set-proc-title no: Redis keeps its arguments, which name DIR (pid_alive).
	cat >"$a/redis.conf" <<EOF
bind 127.0.0.1
port $port
dir $a/redis
save ""
appendonly no
daemonize no
set-proc-title no
logfile ""
EOF
	launch "$dir/redis.pid" "$a/redis.log" redis-server "$a/redis.conf"
	wait_for redis "$dir/redis.pid" "$a/redis.log" redis_ping "$port"
}

# argocd_env DIR: the environment of both Argo CD components: their files
# in DIR/argocd, the API server of DIR/flux/kubeconfig as the in-cluster
# destination, no GnuPG, and argocd on PATH (git runs it as GIT_ASKPASS).
argocd_env() {
	local a="$1/argocd"
	mkdir -p "$a/home" "$a/tmp" "$a/tls" "$a/ssh" "$a/gnupg" "$a/plugins"
	printf '%s\n' env HOME="$a/home" TMPDIR="$a/tmp" PATH="$ARGOCD_DIR:$PATH" \
		KUBECONFIG="$1/flux/kubeconfig" ARGOCD_FAKE_IN_CLUSTER=true \
		ARGOCD_TLS_DATA_PATH="$a/tls" ARGOCD_SSH_DATA_PATH="$a/ssh" ARGOCD_GNUPGHOME="$a/gnupg" \
		ARGOCD_GPG_ENABLED=false ARGOCD_PLUGINSOCKFILEPATH="$a/plugins" ARGOCD_ASK_PASS_SOCK="$a/askpass.sock"
}

repo_server_launch() { # DIR
	local dir=$1 a="$1/argocd" port mport e
	port="$(<"$a/repo-server-port")"
	mport="$(<"$a/repo-server-metrics-port")"
	{ port_in_use "$port" || port_in_use "$mport"; } && return 2
	mapfile -t e < <(argocd_env "$dir")
	launch "$dir/argocd-repo-server.pid" "$a/repo-server.log" "${e[@]}" "$ARGOCD_DIR/argocd-repo-server" \
		--address 127.0.0.1 --port "$port" --metrics-address 127.0.0.1 --metrics-port "$mport" \
		--redis "127.0.0.1:$(<"$a/redis-port")" --disable-tls --logformat text --loglevel info
	# ?full=true: the health check also dials the gRPC server.
	wait_for argocd-repo-server "$dir/argocd-repo-server.pid" "$a/repo-server.log" \
		http_ok "http://127.0.0.1:$mport/healthz?full=true"
}

application_controller_launch() { # DIR
	local dir=$1 a="$1/argocd" mport e
	mport="$(<"$a/controller-metrics-port")"
	port_in_use "$mport" && return 2
	mapfile -t e < <(argocd_env "$dir")
	# --app-resync 30: the controller compares every Application with its
	# source every 30s (3 minutes by default); tests still ask for a refresh
	# after each render, as a webhook would.
	launch "$dir/argocd-application-controller.pid" "$a/application-controller.log" "${e[@]}" \
		"$ARGOCD_DIR/argocd-application-controller" --namespace "$ARGOCD_NAMESPACE" \
		--repo-server "127.0.0.1:$(<"$a/repo-server-port")" --repo-server-plaintext \
		--redis "127.0.0.1:$(<"$a/redis-port")" --metrics-port "$mport" \
		--app-resync 30 --app-resync-jitter 0 --logformat text --loglevel info
	wait_for argocd-application-controller "$dir/argocd-application-controller.pid" \
		"$a/application-controller.log" http_ok "http://127.0.0.1:$mport/healthz"
}

argocd_first_start() { # DIR: after flux_first_start (it needs the API server)
	local dir=$1 a="$1/argocd" p attempt rc t0=$SECONDS
	mkdir -p "$a"
	need redis-server openssl curl jq git
	argocd_objects "$dir"
	for p in redis-port repo-server-port repo-server-metrics-port controller-metrics-port; do
		free_port >"$a/$p"
	done
	for p in redis repo_server application_controller; do
		for attempt in 1 2 3 4 5; do
			rc=0
			"${p}_launch" "$dir" || rc=$?
			[[ $rc -eq 0 ]] && break
			[[ $attempt -lt 5 ]] || die "$p did not start (logs: $a)"
			log "retrying $p on other ports"
			case $p in
			redis) free_port >"$a/redis-port" ;;
			repo_server) free_port >"$a/repo-server-port" && free_port >"$a/repo-server-metrics-port" ;;
			application_controller) free_port >"$a/controller-metrics-port" ;;
			esac
		done
	done
	log "argocd up in $((SECONDS - t0))s"
}

argocd_stop() { # DIR: the controller first, Redis last
	local dir=$1
	stop_pid argocd-application-controller "$dir/argocd-application-controller.pid" "$ARGOCD_BIN" "$dir"
	stop_pid argocd-repo-server "$dir/argocd-repo-server.pid" "$ARGOCD_BIN" "$dir"
	stop_pid redis "$dir/redis.pid" "$(command -v redis-server || echo redis-server)" "$dir"
}

# ---------------------------------------------------------------- commands

write_env() { # DIR WHICH(all|gitea|minio|registry|flux|argocd)
	local dir=$1 which=$2 f="$1/env"
	{
		echo "# Written by scripts/testservers.sh start; source me."
		echo "export RENDER_TEST_SERVERS_DIR='$dir'"
		echo "export RENDER_TEST_SERVERS_SCRIPT='$SCRIPT_PATH'"
		if [[ $which == all || $which == gitea ]]; then
			echo "export RENDER_TEST_GITEA_URL='http://127.0.0.1:$(<"$dir/gitea/port")'"
			echo "export RENDER_TEST_GITEA_USER='$GITEA_USER'"
			echo "export RENDER_TEST_GITEA_PASSWORD='$GITEA_PASSWORD'"
			echo "export RENDER_TEST_GITEA_TOKEN='$(<"$dir/gitea/admin-token")'"
			echo "export RENDER_TEST_GITEA_PIDFILE='$dir/gitea.pid'"
		fi
		if [[ $which == all || $which == minio ]]; then
			echo "export RENDER_TEST_MINIO_ENDPOINT='127.0.0.1:$(<"$dir/minio/port")'"
			echo "export RENDER_TEST_MINIO_ACCESS_KEY='$MINIO_ACCESS_KEY'"
			echo "export RENDER_TEST_MINIO_SECRET_KEY='$MINIO_SECRET_KEY'"
			echo "export RENDER_TEST_MINIO_PIDFILE='$dir/minio.pid'"
		fi
		if [[ $which == all || $which == registry ]]; then
			echo "export RENDER_TEST_REGISTRY_ADDR='127.0.0.1:$(<"$dir/registry/port")'"
			echo "export RENDER_TEST_REGISTRY_USER='$REGISTRY_USER'"
			echo "export RENDER_TEST_REGISTRY_PASSWORD='$REGISTRY_PASSWORD'"
			echo "export RENDER_TEST_REGISTRY_PIDFILE='$dir/registry.pid'"
			echo "export RENDER_TEST_ORAS='$ORAS_BIN'"
		fi
		if [[ -s "$dir/flux/apiserver-port" ]] && { [[ $which == flux || $which == argocd ]] || { [[ $which == all ]] && want_flux; }; }; then
			echo "export RENDER_TEST_KUBE_URL='https://127.0.0.1:$(<"$dir/flux/apiserver-port")'"
			echo "export RENDER_TEST_KUBE_TOKEN='$(<"$dir/flux/token")'"
			echo "export RENDER_TEST_KUBE_CA='$dir/flux/pki/ca.crt'"
			echo "export RENDER_TEST_KUBECONFIG='$dir/flux/kubeconfig'"
			echo "export RENDER_TEST_FLUX_LOGS='$dir/flux'"
		fi
		if [[ -s "$dir/argocd/repo-server-port" ]] && { [[ $which == argocd ]] || { [[ $which == all ]] && want_argocd; }; }; then
			echo "export RENDER_TEST_ARGOCD_NAMESPACE='$ARGOCD_NAMESPACE'"
			echo "export RENDER_TEST_ARGOCD_LOGS='$dir/argocd'"
		fi
	} >"$f.tmp"
	mv -f "$f.tmp" "$f"
}

require_dir() {
	[[ -n "${1:-}" ]] || die "missing DIR argument"
	[[ -d "$1" ]] || die "$1: no such directory"
}

cmd_start() { # DIR [all|gitea|minio|registry|flux|argocd]
	local which=${2:-all} dir
	[[ -n "${1:-}" ]] || die "usage: $0 start DIR [all|gitea|minio|registry|flux|argocd]"
	case "$which" in all | gitea | minio | registry | flux | argocd) ;; *) die "start: unknown server '$which' (all|gitea|minio|registry|flux|argocd)" ;; esac
	[[ $which != flux ]] || export RENDER_TESTSERVERS_FLUX=1
	[[ $which != argocd ]] || export RENDER_TESTSERVERS_ARGOCD=1
	need git setsid
	cmd_build
	dir="$(abs_dir "$1")"
	if [[ -e "$dir/gitea.pid" || -e "$dir/minio.pid" || -e "$dir/registry.pid" || -e "$dir/kube-apiserver.pid" ]]; then
		die "$dir already has pidfiles; run '$0 stop $dir' first or use a fresh directory"
	fi
	# Clean up anything we started if we fail half way.
	trap 'rc=$?; if [[ $rc -ne 0 ]]; then cmd_stop "'"$dir"'" || true; fi' EXIT
	[[ $which != all && $which != gitea ]] || gitea_first_start "$dir"
	[[ $which != all && $which != minio ]] || minio_first_start "$dir"
	[[ $which != all && $which != registry ]] || registry_first_start "$dir"
	if [[ $which == flux || $which == argocd ]] || { [[ $which == all ]] && want_flux; }; then
		flux_first_start "$dir"
	fi
	if [[ $which == argocd ]] || { [[ $which == all ]] && want_argocd; }; then
		argocd_first_start "$dir"
	fi
	write_env "$dir" "$which"
	trap - EXIT
	log "servers ready; source $dir/env"
}

cmd_stop() {
	[[ -n "${1:-}" ]] || die "usage: $0 stop DIR"
	local dir
	[[ -d "$1" ]] || return 0
	dir="$(cd "$1" && pwd)"
	stop_pid gitea "$dir/gitea.pid" "$GITEA_BIN" "$dir"
	stop_pid minio "$dir/minio.pid" "$MINIO_BIN" "$dir"
	stop_pid registry "$dir/registry.pid" "$REGISTRY_BIN" "$dir"
	argocd_stop "$dir"
	flux_stop "$dir"
}

cmd_stop_one() {
	local name=${1:-} dir
	require_dir "${2:-}"
	dir="$(cd "$2" && pwd)"
	case "$name" in
	gitea) stop_pid gitea "$dir/gitea.pid" "$GITEA_BIN" "$dir" ;;
	minio) stop_pid minio "$dir/minio.pid" "$MINIO_BIN" "$dir" ;;
	registry) stop_pid registry "$dir/registry.pid" "$REGISTRY_BIN" "$dir" ;;
	*) die "stop-one: unknown server '$name' (gitea|minio|registry)" ;;
	esac
}

cmd_start_one() {
	local name=${1:-} dir rc=0 i
	require_dir "${2:-}"
	dir="$(cd "$2" && pwd)"
	case "$name" in
	gitea | minio | registry) [[ -s "$dir/$name/port" ]] || die "start-one: $dir was not set up by '$0 start'" ;;
	*) die "start-one: unknown server '$name' (gitea|minio|registry)" ;;
	esac
	# The port may still be held briefly by a dying process; retry a few times.
	for ((i = 0; i < 50; i++)); do
		rc=0
		"${name}_launch" "$dir" || rc=$?
		[[ $rc -eq 2 ]] || break
		sleep 0.2
	done
	[[ $rc -eq 0 ]] || die "start-one: $name failed to restart on its old port (rc=$rc)"
}

cmd_status() {
	require_dir "${1:-}"
	local dir rc=0
	dir="$(cd "$1" && pwd)"
	if pid_alive "$dir/gitea.pid" "$GITEA_BIN" "$dir"; then echo "gitea running pid $(<"$dir/gitea.pid")"; else echo "gitea stopped"; rc=1; fi
	if pid_alive "$dir/minio.pid" "$MINIO_BIN" "$dir"; then echo "minio running pid $(<"$dir/minio.pid")"; else echo "minio stopped"; rc=1; fi
	if pid_alive "$dir/registry.pid" "$REGISTRY_BIN" "$dir"; then echo "registry running pid $(<"$dir/registry.pid")"; else echo "registry stopped"; rc=1; fi
	if [[ -e "$dir/flux/apiserver-port" ]]; then
		local n b
		for n in etcd kube-apiserver source-controller kustomize-controller; do
			case $n in
			etcd) b=$ETCD_BIN ;; kube-apiserver) b=$APISERVER_BIN ;;
			source-controller) b=$SOURCE_CONTROLLER_BIN ;; kustomize-controller) b=$KUSTOMIZE_CONTROLLER_BIN ;;
			esac
			if pid_alive "$dir/$n.pid" "$b" "$dir"; then echo "$n running pid $(<"$dir/$n.pid")"; else echo "$n stopped"; rc=1; fi
		done
	fi
	if [[ -e "$dir/argocd/repo-server-port" ]]; then
		local n b
		for n in redis argocd-repo-server argocd-application-controller; do
			b=$ARGOCD_BIN
			[[ $n != redis ]] || b="$(command -v redis-server || echo redis-server)"
			if pid_alive "$dir/$n.pid" "$b" "$dir"; then echo "$n running pid $(<"$dir/$n.pid")"; else echo "$n stopped"; rc=1; fi
		done
	fi
	return $rc
}

# cmd_with runs one command against fresh servers: make test and make bench
# both use it. RENDER_TESTSERVERS_DIR picks the folder (default: a new
# temporary one). It returns the command's exit code.
cmd_with() {
	while [[ ${1:-} == --flux || ${1:-} == --argocd ]]; do
		if [[ $1 == --flux ]]; then
			export RENDER_TESTSERVERS_FLUX=1
		else
			export RENDER_TESTSERVERS_ARGOCD=1
		fi
		shift
	done
	[[ $# -gt 0 ]] || die "with: no command given"
	local dir="${RENDER_TESTSERVERS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/render-testservers.XXXXXX")}"
	cmd_build
	cmd_start "$dir" || { cmd_stop "$dir" || true; return 1; }
	# After start: start keeps an EXIT trap of its own while it runs.
	trap 'cmd_stop "'"$dir"'" || true' EXIT
	set -a
	# shellcheck disable=SC1091
	. "$dir/env"
	set +a
	local rc=0
	"$@" || rc=$?
	return $rc
}

main() {
	local cmd=${1:-}
	shift || true
	case "$cmd" in
	build) cmd_build ;;
	start) cmd_start "$@" ;;
	stop) cmd_stop "$@" ;;
	stop-one) cmd_stop_one "$@" ;;
	start-one) cmd_start_one "$@" ;;
	status) cmd_status "$@" ;;
	paths)
		printf 'gitea %s\nminio %s\nregistry %s\noras %s\n' "$GITEA_BIN" "$MINIO_BIN" "$REGISTRY_BIN" "$ORAS_BIN"
		printf 'etcd %s\nkube-apiserver %s\n' "$ETCD_BIN" "$APISERVER_BIN"
		printf 'source-controller %s\nkustomize-controller %s\nflux-crds %s\n' \
			"$SOURCE_CONTROLLER_BIN" "$KUSTOMIZE_CONTROLLER_BIN" "$FLUX_CRDS_DIR"
		printf 'argocd %s\n' "$ARGOCD_DIR"
		;;
	with) cmd_with "$@" ;;
	*)
		sed -n '2,32p' "$SCRIPT_PATH" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"; exit  # keep on one line: safe if this file is edited while running
