#!/usr/bin/env bash
# containers.sh - a private Docker engine for the container tests
# (internal/testinfra/containere2e): render's image as the sidecar of a pod, and the
# docker-compose.yaml quickstart, run for real.
#
# Usage:
#   scripts/containers.sh with CMD [ARG...]   set everything up, run CMD with the
#                                             engine's variables exported, tear down
#   scripts/containers.sh images              set up and build the images only
#
# What it does, in order:
#   1. installs docker.io, docker-compose and debootstrap with apt-get when a
#      command is missing (Debian's packages: Docker Engine 20.10, Compose 1.29);
#   2. starts dockerd in the background with --iptables=false (the host's
#      firewall is left alone), --ip=127.0.0.1 (ports published without an
#      address go on loopback only), its images under ${RENDER_CACHE_DIR:-~/.cache/render}/docker (so
#      they survive between runs) and its socket and pidfile in a temporary
#      folder, and waits for `docker info`;
#   3. builds the images. Nothing can be pulled here, so the images the
#      project names are stood in for, on a Debian base made with debootstrap
#      and `docker import` (its root file system cached as a tarball):
#        golang:<go.mod's Go>  this machine's Go of that version, with the
#                              modules and compiled packages render needs
#                              already in its caches (so builds need no network);
#        gitea/gitea:<tag>     the Gitea binary scripts/testservers.sh builds, with
#                              an entrypoint that honours what docker-compose.yaml
#                              sets (GITEA__* variables, USER_UID, /data, su-exec);
#        minio/minio:<tag>     the MinIO binary scripts/testservers.sh builds, with
#                              a stand-in for `mc ready local` (the healthcheck);
#      the tags are read from docker-compose.yaml. Then `make image` builds
#      render's own image from the unchanged Dockerfile;
#   4. runs CMD, then removes every container, network and volume of this
#      engine and stops dockerd by PID, also when CMD or a step failed.
#
# One run at a time per cache folder (a lock; a second run waits).
# It needs root. With CI=true every failure is fatal. Otherwise, when Docker
# cannot be set up here (not root, no apt, dockerd does not start), CMD runs
# without the engine's variables and the tests skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE_DIR="${RENDER_CACHE_DIR:-${HOME}/.cache/render}"
DOCKER_DIR="${CACHE_DIR}/docker"
DATA_ROOT="${DOCKER_DIR}/data"
ROOTFS_DIR="${DOCKER_DIR}/rootfs"
DEBIAN_SUITE="bookworm"
DEBIAN_MIRROR="${RENDER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# The base image: what the stand-ins need (git for Gitea and go, curl for the
# healthchecks and fixtures/compose/init.sh, CA certificates for the Dockerfile).
DEBIAN_INCLUDE="ca-certificates,curl,git"
RENDER_IMAGE="render-test/render:current"
START_TIMEOUT=60

log() { printf '[containers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	if [[ "${CI:-}" == "true" ]]; then
		printf '\n::error::containers.sh: %s\n' "$*" >&2
	fi
	printf '[containers] FATAL: %s\n' "$*" >&2
	exit 1
}

# t0 NAME / t1 NAME: time a step; the figures are printed at the end.
declare -A T_START=()
TIMES=()
t0() { T_START[$1]=$SECONDS; }
t1() { TIMES+=("$1 $((SECONDS - T_START[$1]))s"); }

# ---------------------------------------------------------------- packages

install_packages() {
	local missing=()
	command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
	[[ -x /usr/bin/docker ]] || command -v docker >/dev/null 2>&1 || missing+=(docker.io)
	command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
	command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || missing+=(debootstrap)
	((${#missing[@]} == 0)) && return 0
	mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
	log "installing ${missing[*]} with apt-get"
	t0 apt
	env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || return 1
	env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >&2 || return 1
	t1 apt
}

# ---------------------------------------------------------------- dockerd

RUN_DIR=""
DOCKERD_PID=""

docker_cli() {
	# Debian's client matches Debian's engine; a newer client elsewhere in
	# PATH would build with BuildKit and not share the classic builder's
	# cache with docker-compose.
	if [[ -x /usr/bin/docker ]]; then
		echo /usr/bin/docker
	else
		command -v docker
	fi
}

start_dockerd() {
	local dockerd i
	dockerd="$(command -v dockerd || echo /usr/sbin/dockerd)"
	[[ -x "$dockerd" ]] || return 1
	mkdir -p "$DATA_ROOT"
	# The socket path must stay short (108 bytes): a temporary folder.
	RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/render-docker.XXXXXX")"
	export DOCKER_HOST="unix://${RUN_DIR}/docker.sock"
	log "starting dockerd (data root ${DATA_ROOT}, socket ${RUN_DIR}/docker.sock)"
	t0 dockerd
	# setsid: its own session, so a ^C in the terminal reaches this script,
	# which removes the containers first and then stops dockerd.
	setsid "$dockerd" --iptables=false --ip=127.0.0.1 \
		--data-root "$DATA_ROOT" --exec-root "$RUN_DIR/exec" \
		--pidfile "$RUN_DIR/dockerd.pid" -H "$DOCKER_HOST" \
		--containerd-namespace render-test --containerd-plugins-namespace render-test-plugins \
		</dev/null >"$RUN_DIR/dockerd.log" 2>&1 9>&- &
	DOCKERD_PID=$!
	for ((i = 0; i < START_TIMEOUT * 5; i++)); do
		if "$DOCKER" info >/dev/null 2>&1; then
			t1 dockerd
			log "dockerd up (pid $DOCKERD_PID)"
			return 0
		fi
		kill -0 "$DOCKERD_PID" 2>/dev/null || break
		sleep 0.2
	done
	log "dockerd did not answer; last log lines:"
	tail -n 20 "$RUN_DIR/dockerd.log" >&2 || true
	return 1
}

# cleanup: remove what the tests left (containers run outside our process
# tree), then stop dockerd by PID.
cleanup() {
	local i ids
	if [[ -n "$DOCKERD_PID" ]] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
		ids="$("$DOCKER" ps -aq 2>/dev/null || true)"
		if [[ -n "$ids" ]]; then
			log "removing leftover containers: $(tr '\n' ' ' <<<"$ids")"
			# shellcheck disable=SC2086
			"$DOCKER" rm -f -v $ids >/dev/null 2>&1 || true
		fi
		"$DOCKER" network prune -f >/dev/null 2>&1 || true
		"$DOCKER" volume prune -f >/dev/null 2>&1 || true
		# Superseded images (a moved tag); the stand-ins and the build cache stay.
		"$DOCKER" image prune -f >/dev/null 2>&1 || true
		log "stopping dockerd (pid $DOCKERD_PID)"
		kill -TERM "$DOCKERD_PID" 2>/dev/null || true
		for ((i = 0; i < 200; i++)); do
			kill -0 "$DOCKERD_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$DOCKERD_PID" 2>/dev/null; then
			log "dockerd ignored SIGTERM for 20s; sending SIGKILL"
			kill -KILL "$DOCKERD_PID" 2>/dev/null || true
		fi
		wait "$DOCKERD_PID" 2>/dev/null || true
	fi
	# dockerd starts its own containerd; it stops it, unless dockerd was killed.
	if [[ -n "$RUN_DIR" && -s "$RUN_DIR/exec/containerd/containerd.pid" ]]; then
		local cpid
		cpid="$(<"$RUN_DIR/exec/containerd/containerd.pid")"
		if [[ "$cpid" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$cpid/cmdline" 2>/dev/null | grep -qF "$RUN_DIR"; then
			log "stopping containerd (pid $cpid)"
			kill -TERM "$cpid" 2>/dev/null || true
		fi
	fi
	if [[ -n "$RUN_DIR" ]]; then
		# dockerd leaves its network namespace mounted under the exec root.
		local m
		awk -v d="$RUN_DIR/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r |
			while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
		rm -rf "$RUN_DIR" 2>/dev/null || log "could not remove $RUN_DIR"
	fi
}

# ---------------------------------------------------------------- images

sha() { sha256sum | cut -c1-16; }

# image_key TAG: the key an image was built with (its label), or nothing.
image_key() {
	"$DOCKER" image inspect -f '{{index .Config.Labels "dev.render.test.key"}}' "$1" 2>/dev/null || true
}

# compose_image NAME: the image docker-compose.yaml names for NAME (gitea/gitea).
compose_image() {
	local img
	img="$(sed -n "s|^[[:space:]]*image:[[:space:]]*\\($1:[^[:space:]]*\\).*|\\1|p" docker-compose.yaml | head -n1)"
	[[ -n "$img" ]] || die "docker-compose.yaml names no $1 image"
	echo "$img"
}

BASE_IMAGE=""

# The Debian base: debootstrap once (cached as a tarball), then docker import.
build_base() {
	local key tar dir
	key="$(printf '%s %s %s v1' "$DEBIAN_SUITE" "$DEBIAN_INCLUDE" "$DEBIAN_MIRROR" | sha)"
	BASE_IMAGE="render-test/debian:${DEBIAN_SUITE}-${key}"
	if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
		log "base image ${BASE_IMAGE}: present"
		return 0
	fi
	tar="${ROOTFS_DIR}/debian-${DEBIAN_SUITE}-minbase-${key}.tar"
	if [[ ! -s "$tar" ]]; then
		command -v debootstrap >/dev/null 2>&1 || [[ -x /usr/sbin/debootstrap ]] || die "debootstrap is not installed"
		mkdir -p "$ROOTFS_DIR"
		dir="$(mktemp -d "${ROOTFS_DIR}/build.XXXXXX")"
		log "debootstrap ${DEBIAN_SUITE} (minbase + ${DEBIAN_INCLUDE}) from ${DEBIAN_MIRROR}"
		t0 debootstrap
		if ! "$(command -v debootstrap || echo /usr/sbin/debootstrap)" --variant=minbase \
			--include="$DEBIAN_INCLUDE" "$DEBIAN_SUITE" "$dir/root" "$DEBIAN_MIRROR" >"$dir/log" 2>&1; then
			tail -n 20 "$dir/log" >&2
			rm -rf "$dir"
			die "debootstrap failed (see above)"
		fi
		# What an image does not need: downloaded packages, package lists, docs.
		rm -rf "$dir/root/var/cache/apt/archives/"*.deb "$dir/root/var/lib/apt/lists/"* \
			"$dir/root/usr/share/doc" "$dir/root/usr/share/man" "$dir/root/usr/share/locale" \
			"$dir/root/usr/share/info"
		tar -C "$dir/root" --numeric-owner -cf "$tar.tmp" .
		mv -f "$tar.tmp" "$tar"
		rm -rf "$dir"
		t1 debootstrap
		log "root file system cached: $tar ($(du -h "$tar" | cut -f1))"
	else
		log "root file system: cached at $tar"
	fi
	t0 import
	"$DOCKER" import -c 'CMD ["/bin/bash"]' \
		-c "LABEL dev.render.test.key=${key}" "$tar" "$BASE_IMAGE" >/dev/null
	t1 import
	log "base image ${BASE_IMAGE}: imported"
}

# build_standin TAG KEY STAGE [BUILD ARGS...]: docker build STAGE (a folder
# with a Dockerfile; symbolic links are followed) as TAG unless TAG was
# built with KEY.
build_standin() {
	local tag=$1 key=$2 stage=$3
	shift 3
	if [[ "$(image_key "$tag")" == "$key" ]]; then
		log "${tag}: present (key ${key})"
		return 0
	fi
	log "${tag}: building the stand-in"
	t0 "$tag"
	tar -C "$stage" -ch . | "$DOCKER" build -q -t "$tag" --label "dev.render.test.key=${key}" "$@" - >/dev/null ||
		die "building the stand-in ${tag} failed"
	t1 "$tag"
}

# golang:<version>: this machine's Go, with render's modules downloaded and
# its dependencies compiled, as `go build` in the Dockerfile will compile
# them (CGO_ENABLED=0, -trimpath).
build_golang() {
	local gover modver stage key
	gover="$(go env GOVERSION)"
	gover="${gover#go}"
	modver="$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' go.mod)"
	[[ "$gover" == "$modver" ]] ||
		die "the Dockerfile builds with golang:${modver}; this machine's Go is ${gover}: install Go ${modver}"
	grep -q "^FROM golang:${gover} " Dockerfile || die "the Dockerfile's builder is not golang:${gover}"
	stage="$RUN_DIR/golang"
	mkdir -p "$stage/warm"
	ln -s "$(go env GOROOT)" "$stage/go"
	cp go.mod go.sum "$stage/warm/"
	# The module proxy is reached with this machine's CA certificates (it
	# may sit behind a TLS-inspecting proxy that Debian's bundle does not
	# know); they are used by the warm-up only and removed with it.
	cp "${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}" "$stage/warm/ca.crt"
	go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./cmd/render |
		grep -v '^github.com/render-dev/render' >"$stage/warm/deps.txt"
	cat >"$stage/Dockerfile" <<EOF
# Stand-in for golang:${gover} (which cannot be pulled here): Go ${gover}
# from this machine on Debian ${DEBIAN_SUITE}, laid out as the official image
# (GOROOT /usr/local/go, GOPATH /go, running as root).
FROM ${BASE_IMAGE}
COPY go /usr/local/go
ENV GOLANG_VERSION=${gover} GOPATH=/go GOTOOLCHAIN=local PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY warm /warm
ARG GOPROXY
ARG GOSUMDB
ARG GONOSUMDB
ARG GOPRIVATE
ARG GONOPROXY
ARG GOINSECURE
RUN cd /warm && export SSL_CERT_FILE=/warm/ca.crt && go mod download && \\
    CGO_ENABLED=0 go build -trimpath \$(cat deps.txt) && \\
    rm -rf /warm
WORKDIR /go
EOF
	# Keyed by the modules (go.sum) and Go, not by the list of packages
	# warmed: a change of render's own imports (a refactor) changes that
	# list, and rebuilt the stand-in for 24 minutes at the lowest CPU
	# priority beside the tests (2026-11-27), where an image warmed with
	# the older list only leaves `make image` a few more packages to build.
	key="$( (cat "$stage/Dockerfile" "$stage/warm/go.sum"; go version) | sha)"
	# The warm-up downloads modules: the host's network, and its Go and proxy
	# settings (build arguments: they do not stay in the image).
	local args=(--network host) v
	for v in GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GONOPROXY GOINSECURE; do
		args+=(--build-arg "$v=$(go env "$v")")
	done
	for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
		[[ -z "${!v:-}" ]] || args+=(--build-arg "$v=${!v}")
	done
	build_standin "golang:${gover}" "$key" "$stage" "${args[@]}"
}

build_gitea() { # BINARY
	local bin=$1 tag stage key
	tag="$(compose_image gitea/gitea)"
	[[ "${tag#*:}" == "$(basename "$bin" | sed 's/^gitea-v//')" ]] ||
		die "docker-compose.yaml runs ${tag}, the suite builds $(basename "$bin")"
	stage="$RUN_DIR/gitea"
	mkdir -p "$stage"
	ln -s "$bin" "$stage/gitea"
	cat >"$stage/su-exec" <<'EOF'
#!/bin/sh
# su-exec USER[:GROUP] COMMAND...: run COMMAND as USER (as Alpine's su-exec,
# which the upstream image has), with setpriv from util-linux.
set -e
user=${1%%:*}
shift
home=$(getent passwd "$user" | cut -d: -f6)
exec env HOME="$home" USER="$user" setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- "$@"
EOF
	cat >"$stage/entrypoint" <<'EOF'
#!/bin/sh
# The upstream image's start-up, reduced to what render's tests and
# docker-compose.yaml use: USER_UID/USER_GID, /data/gitea/conf/app.ini made
# from the same defaults, GITEA__section__KEY variables applied to it on
# every start, and `gitea web` as the git user. A command given to the
# container runs instead (as upstream, as root).
set -e
if [ -n "${USER_GID:-}" ] && [ "$USER_GID" != "$(id -g git)" ]; then groupmod -o -g "$USER_GID" git; fi
if [ -n "${USER_UID:-}" ] && [ "$USER_UID" != "$(id -u git)" ]; then usermod -o -u "$USER_UID" git; fi
if [ $# -gt 0 ]; then exec "$@"; fi
ini=/data/gitea/conf/app.ini
mkdir -p /data/git/repositories /data/gitea/conf /data/gitea/log
if [ ! -f "$ini" ]; then
	cat >"$ini" <<INI
APP_NAME = ${APP_NAME:-Gitea: Git with a cup of tea}
RUN_MODE = ${RUN_MODE:-prod}
RUN_USER = git
WORK_PATH = /data/gitea

[repository]
ROOT = /data/git/repositories

[server]
APP_DATA_PATH = /data/gitea
DOMAIN = ${DOMAIN:-localhost}
SSH_DOMAIN = ${SSH_DOMAIN:-localhost}
HTTP_PORT = ${HTTP_PORT:-3000}
ROOT_URL = ${ROOT_URL:-}
DISABLE_SSH = ${DISABLE_SSH:-false}
SSH_PORT = ${SSH_PORT:-22}
SSH_LISTEN_PORT = ${SSH_LISTEN_PORT:-22}
LFS_START_SERVER = ${LFS_START_SERVER:-false}

[database]
PATH = /data/gitea/gitea.db
DB_TYPE = ${DB_TYPE:-sqlite3}

[log]
MODE = console
LEVEL = info
ROOT_PATH = /data/gitea/log

[security]
INSTALL_LOCK = ${INSTALL_LOCK:-false}
SECRET_KEY = ${SECRET_KEY:-}

[service]
DISABLE_REGISTRATION = ${DISABLE_REGISTRATION:-false}
REQUIRE_SIGNIN_VIEW = ${REQUIRE_SIGNIN_VIEW:-false}

[lfs]
PATH = /data/git/lfs
INI
fi
chown -R git:git /data/git /data/gitea
su-exec git gitea config edit-ini --config "$ini" --in-place --apply-env
exec su-exec git gitea web --config "$ini"
EOF
	chmod 755 "$stage/su-exec" "$stage/entrypoint"
	cat >"$stage/Dockerfile" <<EOF
# Stand-in for ${tag} (which cannot be pulled here): the same Gitea version,
# built from source by scripts/testservers.sh, on Debian ${DEBIAN_SUITE}.
FROM ${BASE_IMAGE}
RUN groupadd -g 1000 git && useradd -u 1000 -g git -d /data/git -s /bin/sh git
COPY gitea /app/gitea/gitea
COPY su-exec entrypoint /usr/local/bin/
RUN ln -s /app/gitea/gitea /usr/local/bin/gitea && mv /usr/local/bin/entrypoint /usr/bin/entrypoint
ENV USER=git GITEA_CUSTOM=/data/gitea
VOLUME ["/data"]
EXPOSE 22 3000
ENTRYPOINT ["/usr/bin/entrypoint"]
EOF
	key="$( (cat "$stage/Dockerfile" "$stage/su-exec" "$stage/entrypoint"; basename "$bin"; stat -c %s "$bin") | sha)"
	build_standin "$tag" "$key" "$stage"
}

build_minio() { # BINARY
	local bin=$1 tag stage key
	tag="$(compose_image minio/minio)"
	stage="$RUN_DIR/minio"
	mkdir -p "$stage"
	ln -s "$bin" "$stage/minio"
	cat >"$stage/mc" <<'EOF'
#!/bin/sh
# Stand-in for MinIO's client, for the healthcheck in docker-compose.yaml:
# `mc ready local` asks the server on localhost:9000 whether it is ready.
if [ "$#" -eq 2 ] && [ "$1" = ready ] && [ "$2" = local ]; then
	exec curl -fsS -o /dev/null --max-time 2 http://localhost:9000/minio/health/ready
fi
echo "mc (stand-in): only 'mc ready local' is available" >&2
exit 2
EOF
	cat >"$stage/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
# As the upstream image's entrypoint: arguments that do not start with
# `minio` are arguments of minio.
if [ "${1:-}" != minio ] && [ -n "${1:-}" ]; then set -- minio "$@"; fi
exec "$@"
EOF
	chmod 755 "$stage/mc" "$stage/docker-entrypoint.sh"
	cat >"$stage/Dockerfile" <<EOF
# Stand-in for ${tag} (which cannot be pulled here): MinIO built from source
# by scripts/testservers.sh ($(basename "$bin")), on Debian ${DEBIAN_SUITE}.
FROM ${BASE_IMAGE}
COPY minio mc docker-entrypoint.sh /usr/bin/
EXPOSE 9000
VOLUME ["/data"]
ENTRYPOINT ["/usr/bin/docker-entrypoint.sh"]
CMD ["minio"]
EOF
	key="$( (cat "$stage/Dockerfile" "$stage/mc" "$stage/docker-entrypoint.sh"; basename "$bin"; stat -c %s "$bin") | sha)"
	build_standin "$tag" "$key" "$stage"
}

build_render() {
	log "${RENDER_IMAGE}: make image"
	t0 render-image
	# DOCKER_BUILDKIT=0: the classic builder, whose cache docker-compose's
	# builds share.
	DOCKER_BUILDKIT=0 make -s image IMAGE="$RENDER_IMAGE" DOCKER="$DOCKER" DOCKER_BUILD_FLAGS=-q >/dev/null ||
		die "make image failed"
	t1 render-image
}

build_images() {
	local paths gitea minio
	t0 testservers
	scripts/testservers.sh build >&2 || die "scripts/testservers.sh build failed"
	t1 testservers
	paths="$(scripts/testservers.sh paths)"
	gitea="$(awk '$1 == "gitea" {print $2}' <<<"$paths")"
	minio="$(awk '$1 == "minio" {print $2}' <<<"$paths")"
	[[ -x "$gitea" && -x "$minio" ]] || die "scripts/testservers.sh paths: no gitea or minio binary"
	build_base
	build_golang
	build_gitea "$gitea"
	build_minio "$minio"
	build_render
}

# ---------------------------------------------------------------- main

# setup sets READY=1 when the engine runs and the images are built. When
# Docker cannot be had here it fails with CI=true, and otherwise returns
# with READY=0 (the tests then skip). A failing build always fails.
READY=0
setup() {
	if [[ $EUID -ne 0 ]]; then
		[[ "${CI:-}" == "true" ]] && die "the container tests need root (apt-get, dockerd, debootstrap)"
		log "not root: no Docker engine here; the container tests will skip"
		return 0
	fi
	if ! install_packages; then
		[[ "${CI:-}" == "true" ]] && die "installing docker.io, docker-compose and debootstrap failed"
		log "cannot install Docker here; the container tests will skip"
		return 0
	fi
	DOCKER="$(docker_cli)"
	mkdir -p "$DOCKER_DIR"
	exec 9>"$DOCKER_DIR/.lock"
	if ! flock -n 9; then
		log "waiting for another run using ${DOCKER_DIR}"
		flock 9
	fi
	local other
	other="$(pgrep -f -- "--data-root ${DATA_ROOT}( |\$)" || true)"
	[[ -z "$other" ]] || die "a dockerd this script did not start uses ${DATA_ROOT} (pid ${other//$'\n'/ }); stop it first"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	if ! start_dockerd; then
		[[ "${CI:-}" == "true" ]] && die "dockerd did not start"
		log "dockerd did not start; the container tests will skip"
		cleanup
		trap - EXIT
		return 0
	fi
	build_images
	export RENDER_TEST_DOCKER="$DOCKER"
	RENDER_TEST_DOCKER_COMPOSE="$(command -v docker-compose)"
	export RENDER_TEST_DOCKER_COMPOSE
	export RENDER_TEST_RENDER_IMAGE="$RENDER_IMAGE"
	export RENDER_TEST_BASE_IMAGE="$BASE_IMAGE"
	RENDER_TEST_GITEA_IMAGE="$(compose_image gitea/gitea)"
	RENDER_TEST_MINIO_IMAGE="$(compose_image minio/minio)"
	export RENDER_TEST_GITEA_IMAGE RENDER_TEST_MINIO_IMAGE
	export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
	READY=1
}

print_times() {
	((${#TIMES[@]} > 0)) && log "times: ${TIMES[*]}"
	return 0
}

main() {
	local cmd=${1:-} rc=0
	shift || true
	case "$cmd" in
	with)
		[[ $# -gt 0 ]] || die "with: no command given"
		t0 total
		setup
		t0 tests
		"$@" || rc=$?
		t1 tests
		t1 total
		print_times
		return $rc
		;;
	images)
		t0 total
		setup
		((READY)) || die "no Docker engine"
		t1 total
		print_times
		;;
	*)
		sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"; exit
