#!/usr/bin/env bash
# Builds what beam-tfrecord needs to run on Beam's portable engines, into a cache folder.
# For now: Prism only (issue 39; Spark and Flink come later).
#
#   bash deploy/engines/setup.sh [prism]
#
# Both programs are Go modules, built with `go install` from the Go module proxy (GOPROXY as
# configured; https://proxy.golang.org by default) at the Beam SDK's own version, read from the
# project's Python (importlib.metadata, so Beam is not imported):
#   prism  github.com/apache/beam/sdks/v2/go/cmd/prism@vV     Beam's portable runner
#          -> $ENGINES_CACHE/prism/vV/prism                     (--prism_location)
#   boot   github.com/apache/beam/sdks/v2/python/container@vV  the Python SDK's worker boot,
#          -> $ENGINES_CACHE/python-boot/vV/boot                the entry point of Beam's (and
#                                                               Dataflow's) Python containers;
#          --environment_type=PROCESS runs it per worker (deploy/engines/worker.sh): it asks
#          the runner's provision service for the endpoints and options, installs what the
#          job staged, and starts `python -m apache_beam.runners.worker.sdk_worker_main`.
# Idempotent: a binary already there is not built again (a build goes to a temporary folder
# first, so a failed one leaves nothing half-made).
#
# If the proxy refuses vV, the refusal is printed as go reported it, and the nearest served
# versions are tried (the proxy's own list: the newest below V first, then the oldest above).
# A binary of another version is reported as a mismatch (issue 39, item 5 wants them equal).
#
# Environment:
#   ENGINES_CACHE   cache folder (default ~/.cache/beam-tfrecord/engines)
#   BEAM_PYTHON     the Python whose apache-beam version is matched (default: the
#                   repository's .venv/bin/python, else python3)
#   BEAM_VERSION    the version to build (e.g. 2.77.0) instead of asking Python
# Prints the paths of the binaries on stdout (prism first); everything else goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ENGINES_CACHE=${ENGINES_CACHE:-$HOME/.cache/beam-tfrecord/engines}
ENGINE=${1:-prism}
MODULE=github.com/apache/beam/sdks/v2

log() { echo "setup.sh: $*" >&2; }

case "$ENGINE" in
  prism) ;;
  spark|flink) log "$ENGINE: not set up by this script yet (issue 39, a later part)"; exit 2 ;;
  *) log "unknown engine '$ENGINE' (known: prism)"; exit 2 ;;
esac

if [ -z "${BEAM_VERSION:-}" ]; then
  PY=${BEAM_PYTHON:-}
  if [ -z "$PY" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY=python3; fi
  fi
  BEAM_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("apache-beam"))') ||
    { log "$PY has no apache-beam installed"; exit 1; }
fi
command -v go >/dev/null || { log "go is not on PATH (needed to build Prism)"; exit 1; }

# build NAME PACKAGE VERSION: go install PACKAGE@vVERSION -> $ENGINES_CACHE/NAME/vVERSION/
# (the binary keeps the package's last path element as its name, then is renamed to $4)
build() {
  local name=$1 pkg=$2 v=$3 bin=$4
  local dir="$ENGINES_CACHE/$name/v$v"
  if [ -x "$dir/$bin" ]; then
    log "$name v$v: already built ($dir/$bin)"
    return 0
  fi
  mkdir -p "$dir"
  log "$name v$v: go install $pkg@v$v ..."
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  if GOBIN="$tmp" GOFLAGS="${GOFLAGS:--buildvcs=false}" go install "$pkg@v$v" 2>"$tmp/go.log"; then
    mv "$tmp/${pkg##*/}" "$dir/$bin"
    rm -rf "$tmp"
    log "$name v$v: built in $((SECONDS - t0)) s -> $dir/$bin"
    return 0
  fi
  log "$name v$v: go install $pkg@v$v FAILED; go said:"
  sed 's/^/    /' "$tmp/go.log" >&2
  rm -rf "$tmp"
  rmdir "$dir" 2>/dev/null || true
  return 1
}

# nearest_versions V: the versions of $MODULE the proxy serves, nearest to V first
nearest_versions() {
  local v=$1 all
  all=$(go list -m -versions "$MODULE" 2>/dev/null | tr ' ' '\n' | grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$' |
        sed 's/^v//' | sort -V) || true
  [ -n "$all" ] || { log "the proxy lists no release of $MODULE"; return 0; }
  { printf '%s\n' "$all" "$v" | sort -V | sed -n "/^$v\$/q;p" | sort -rV | head -3
    printf '%s\n' "$all" | sort -V | awk -v v="$v" 'f { print } $0 == v { f = 1 }' | head -3
  } | grep -vx "$v" || true
}

# build_matching NAME PACKAGE BINARY: at the SDK's version, else the nearest served one
build_matching() {
  local name=$1 pkg=$2 bin=$3 v
  if build "$name" "$pkg" "$BEAM_VERSION" "$bin"; then
    echo "$ENGINES_CACHE/$name/v$BEAM_VERSION/$bin"
    return 0
  fi
  log "$name: v$BEAM_VERSION was refused or failed to build; trying the nearest versions the proxy serves"
  for v in $(nearest_versions "$BEAM_VERSION"); do
    if build "$name" "$pkg" "$v" "$bin"; then
      log "WARNING: $name v$v does not match the Beam SDK v$BEAM_VERSION (issue 39, item 5)"
      echo "$ENGINES_CACHE/$name/v$v/$bin"
      return 0
    fi
  done
  log "$name: no served version of $pkg near v$BEAM_VERSION could be built"
  return 1
}

build_matching prism "$MODULE/go/cmd/prism" prism
build_matching python-boot "$MODULE/python/container" boot
