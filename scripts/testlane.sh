#!/usr/bin/env bash
# testlane.sh - run packages' tests one after another, as `go test -json -p 1`
# does, but with each test binary linked ahead of its turn and kept between
# runs.
#
#   scripts/testlane.sh [go test flags...] -- PKG...
#   scripts/testlane.sh --dir    # print the folder of this clone's binaries
#
# `go test` links a package's test binary again on every run (its build
# cache keeps compiled packages, not linked test binaries), one after the
# other at -p 1: in `make test` that was about 290 s of lane A's time, with
# the servers idle. Here a background loop builds the binaries in the
# packages' order (`go test -c`) while the foreground runs each package's
# binary as soon as it is built, so that linking the next package overlaps
# running this one. The binaries are
# written to TESTBIN (default: a folder per clone under
# ${RENDER_CACHE_DIR:-~/.cache/render}/testbin, the three clones used last),
# outside the repository; go rewrites a binary only when what it is built
# from changed, so a second run of the same tree links nothing. They are
# built with -trimpath, so that what they are built from does not include
# the clone's folder: a fresh clone elsewhere compiles none of the module's
# packages that the build cache already holds (it still links).
#
# Each binary runs in its package's folder, as `go test` runs it, through
# `go tool test2json`, so the JSON on stdout is what `go test -json` prints.
# The flags understood are those make test passes on: -run, -skip, -count,
# -timeout, -short, -failfast, -parallel (and -v and -p, which mean nothing
# here: the JSON stream is verbose, and packages run one at a time). A package whose binary fails to build
# is handed to `go test -json` itself, which reports the build failure as it
# always does. Exit code: 1 if any package failed, else 0.
set -uo pipefail
cd "$(dirname "$0")/.."

args=()
dironly=0
while (($#)); do
	case $1 in
	--) shift; break ;;
	--dir) dironly=1; shift ;;
	-run | -skip | -count | -timeout | -parallel)
		args+=("-test.${1#-}=$2"); shift 2 ;;
	-run=* | -skip=* | -count=* | -timeout=* | -parallel=* | -short | -short=* | -failfast | -failfast=*)
		args+=("-test.${1#-}"); shift ;;
	-v | -v=*) shift ;; # the JSON stream is verbose already
	-p) shift 2 ;;
	-p=*) shift ;;
	*) echo "testlane.sh: flag $1 is not one it passes on to a test binary" >&2; exit 2 ;;
	esac
done
pkgs=("$@")
((${#pkgs[@]} || dironly)) || { echo "testlane.sh: no packages (usage: testlane.sh [flags] -- PKG...)" >&2; exit 2; }

cache="${RENDER_CACHE_DIR:-${HOME}/.cache/render}"
testbin="${TESTBIN:-$cache/testbin/$(pwd -P | sha256sum | cut -c1-16)}"
mkdir -p "$testbin"
touch "$testbin"
# A clone's binaries take about 3 GB: keep this clone's and the two clones'
# used last, and let the others go.
if [[ -z ${TESTBIN:-} ]]; then
	ls -1dt "$cache/testbin"/*/ 2>/dev/null | tail -n +4 | xargs -r rm -rf
fi
if [[ $dironly == 1 ]]; then
	echo "$testbin"
	exit 0
fi
# Markers for this run only: a binary left by an earlier run is not taken
# for this run's until this run's build has checked it is up to date.
marks=$(mktemp -d)
trap 'pkill -P "$builder" 2>/dev/null; kill "$builder" 2>/dev/null; wait "$builder" 2>/dev/null; rm -rf "$marks"' EXIT

name() { echo "${1//\//_}"; }

(
	for p in "${pkgs[@]}"; do
		n=$(name "$p")
		if go test -c -trimpath -o "$testbin/$n.test" "$p" >"$marks/$n.log" 2>&1; then
			touch "$marks/$n.ok"
		else
			touch "$marks/$n.err"
		fi
	done
) &
builder=$!

rc=0
for p in "${pkgs[@]}"; do
	n=$(name "$p")
	while [[ ! -e $marks/$n.ok && ! -e $marks/$n.err ]]; do
		if ! kill -0 "$builder" 2>/dev/null && [[ ! -e $marks/$n.ok && ! -e $marks/$n.err ]]; then
			touch "$marks/$n.err" # the builder died: let go test say why
			break
		fi
		sleep 0.2
	done
	if [[ -e $marks/$n.err ]]; then
		go test -json "${args[@]/#-test./-}" "$p" || rc=1
		continue
	fi
	if grep -q '\[no test files\]' "$marks/$n.log" || [[ ! -x $testbin/$n.test ]]; then
		# No test files (go test -c then writes nothing, and a binary an
		# earlier run left, when the package had tests, must not run):
		# what go test -json says for such a package.
		rm -f "$testbin/$n.test"
		printf '{"Action":"start","Package":"%s"}\n{"Action":"output","Package":"%s","Output":"?   \\t%s\\t[no test files]\\n"}\n{"Action":"skip","Package":"%s","Elapsed":0}\n' "$p" "$p" "$p" "$p"
		continue
	fi
	dir=$(go list -f '{{.Dir}}' "$p")
	t0=$EPOCHREALTIME
	res=ok
	(cd "$dir" && go tool test2json -t -p "$p" "$testbin/$n.test" -test.v=test2json -test.paniconexit0 "${args[@]}") || res=FAIL
	# The summary line go test prints itself (a test binary does not).
	printf '{"Action":"output","Package":"%s","Output":"%s\\t%s\\t%.3fs\\n"}\n' "$p" "$([[ $res == ok ]] && echo 'ok  ' || echo FAIL)" "$p" \
		"$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
	[[ $res == ok ]] || rc=1
done
exit $rc
