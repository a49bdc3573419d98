#!/usr/bin/env bash
# Scheduled beam-tfrecord conversion, for cron. Each run that converts writes a new dated version
#   DEST/versions/20260101T020000Z/   shards, label_map.pbtxt, manifest.json, errors-*.jsonl
# and moves DEST/LATEST (a symlink) to it only after the conversion succeeded and
# `beam-tfrecord verify` passed. Runs never overlap (flock on DEST/.lock: a second one logs
# "already running" and exits 0). Unchanged sources are skipped (`convert --if-changed`, against
# the fingerprint in LATEST's manifest). Each version is converted incrementally from LATEST
# (`convert --incremental --plan-from LATEST`): only changed images are encoded again, and
# the shards they do not touch are hard links to LATEST's, so versions share them on disk.
# Only the last K versions are kept (never LATEST's).
# A run in progress writes to DEST/versions/.inprogress-VERSION, so a killed or failed run
# leaves nothing that looks finished, and LATEST is untouched; the next run removes it.
#
#   beam-tfrecord-cron.sh --dest DIR [--keep K] [--log FILE] [--force] [--full] -- CONVERT-OPTIONS...
#
#   CONVERT-OPTIONS  everything `beam-tfrecord convert` takes except --output (and --overwrite),
#                    Beam options included, e.g. --format coco --input train=/data/train.json ...
#   --keep K         versions to keep (default 5)
#   --log FILE       append the log here (default DEST/logs/cron.log)
#   --force          convert even if the sources are unchanged
#   --full           encode every image (no --incremental; the shards are planned afresh)
# Exit status: 0 converted, skipped (unchanged) or already running; else the failing step's
# status (convert's, or 1 for verify and setup errors), LATEST unchanged.
# Environment: BEAM_TFRECORD, the command to run (default: `beam-tfrecord` on PATH, else this
# repository's .venv/bin/python -m beam_tfrecord.cli).
set -uo pipefail

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^set /d' >&2; exit 2; }

DEST="" KEEP=5 LOG="" FORCE=0 FULL=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --dest) DEST="$2"; shift 2 ;;
    --dest=*) DEST="${1#*=}"; shift ;;
    --keep) KEEP="$2"; shift 2 ;;
    --keep=*) KEEP="${1#*=}"; shift ;;
    --log) LOG="$2"; shift 2 ;;
    --log=*) LOG="${1#*=}"; shift ;;
    --force) FORCE=1; shift ;;
    --full) FULL=1; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "beam-tfrecord-cron: unknown option $1 (convert options go after --)" >&2; exit 2 ;;
  esac
done
[ -n "$DEST" ] && [ "$#" -gt 0 ] || usage
case "$KEEP" in ''|*[!0-9]*|0) echo "beam-tfrecord-cron: --keep must be a positive number" >&2; exit 2 ;; esac
for arg in "$@"; do
  case "$arg" in --output|--output=*|--overwrite|--plan-from|--plan-from=*|--incremental)
    echo "beam-tfrecord-cron: $arg is set by the wrapper" >&2; exit 2 ;; esac
done

mkdir -p "$DEST/versions" || exit 1
DEST="$(cd "$DEST" && pwd)"
LOG="${LOG:-$DEST/logs/cron.log}"
mkdir -p "$(dirname "$LOG")" || exit 1

log() { printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" "$*" | tee -a "$LOG" >&2; }

if [ -n "${BEAM_TFRECORD:-}" ]; then
  read -r -a TOOL <<<"$BEAM_TFRECORD"
elif command -v beam-tfrecord >/dev/null 2>&1; then
  TOOL=(beam-tfrecord)
else
  ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
  TOOL=("$ROOT/.venv/bin/python" -m beam_tfrecord.cli)
fi

# One run at a time. The lock is held by fd 9, which the conversion inherits: a wrapper killed
# with SIGKILL keeps the lock until its conversion has ended too.
exec 9>>"$DEST/.lock"
if ! flock -n 9; then
  log "already running (lock $DEST/.lock held); exiting"
  exit 0
fi

child=""
on_signal() {
  log "interrupted by SIG$1; LATEST unchanged"
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  [ -n "${WORK:-}" ] && rm -rf -- "$WORK"
  exit 130
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

run() {  # run a command in the background so that signals reach the trap; log its output
  "$@" >>"$LOG" 2>&1 &
  child=$!
  wait "$child"
  local status=$?
  child=""
  return "$status"
}

# Leftovers of runs that were killed: nobody else can be running now (we hold the lock).
for stale in "$DEST"/versions/.inprogress-*; do
  [ -e "$stale" ] || continue
  log "removing the unfinished run $stale"
  rm -rf -- "$stale"
done

# LATEST is ours only as versions/NAME, a plain name in DEST/versions (what the publish step
# below makes): a LATEST edited to point elsewhere is refused, not followed or replaced.
LATEST_NAME=""
if [ -L "$DEST/LATEST" ]; then
  target="$(readlink "$DEST/LATEST")"
  case "$target" in versions/*) LATEST_NAME="${target#versions/}" ;; esac
  case "$LATEST_NAME" in
    ''|.*|*/*|*\\*)
      log "LATEST points to $target, not a version in $DEST/versions; nothing changed" \
          "(fix or remove LATEST)"
      exit 1 ;;
  esac
fi

VERSION="$(date -u +%Y%m%dT%H%M%SZ)"
n=1
while [ -e "$DEST/versions/$VERSION" ]; do VERSION="$(date -u +%Y%m%dT%H%M%SZ)-$n"; n=$((n + 1)); done
WORK="$DEST/versions/.inprogress-$VERSION"
mkdir -p "$WORK" || exit 1

LATEST_DIR=""
if [ -n "$LATEST_NAME" ] && [ -f "$DEST/versions/$LATEST_NAME/manifest.json" ]; then
  LATEST_DIR="$DEST/versions/$LATEST_NAME"
fi
IF_CHANGED=()
if [ "$FORCE" = 0 ]; then
  IF_CHANGED=(--if-changed)
  # --if-changed compares with the manifest in the output directory: give the new one LATEST's.
  # If the sources changed, convert replaces it (an earlier run of ours); if not, it is left
  # exactly as copied and the run is a skip.
  [ -n "$LATEST_DIR" ] && cp -p "$LATEST_DIR/manifest.json" "$WORK/manifest.json"
fi

INCREMENTAL=()
if [ "$FULL" = 0 ]; then
  # the first version is a full run that writes the shard indexes the next ones compare with
  INCREMENTAL=(--incremental)
  [ -n "$LATEST_DIR" ] && INCREMENTAL+=(--plan-from "$LATEST_DIR")
fi

log "run $VERSION: ${TOOL[*]} convert $* ${IF_CHANGED[*]} ${INCREMENTAL[*]} --output $WORK"
run "${TOOL[@]}" convert "$@" "${IF_CHANGED[@]}" "${INCREMENTAL[@]}" --output "$WORK"
status=$?
if [ "$status" -ne 0 ]; then
  log "run $VERSION: convert failed with status $status; LATEST unchanged"
  rm -rf -- "$WORK"
  exit "$status"
fi
if [ -n "$LATEST_DIR" ] && [ "$FORCE" = 0 ] && cmp -s "$LATEST_DIR/manifest.json" "$WORK/manifest.json"; then
  log "run $VERSION: sources unchanged since $(basename "$LATEST_DIR"); skipped"
  rm -rf -- "$WORK"
  exit 0
fi

if ! run "${TOOL[@]}" verify "$WORK"; then
  log "run $VERSION: verify failed; LATEST unchanged (output removed)"
  rm -rf -- "$WORK"
  exit 1
fi

# Publish: the version directory appears complete in one rename, then LATEST is swapped in one
# rename of a new symlink over the old one.
mv -T -- "$WORK" "$DEST/versions/$VERSION" || exit 1
ln -sfn "versions/$VERSION" "$DEST/.LATEST.new" && mv -T -- "$DEST/.LATEST.new" "$DEST/LATEST" || {
  log "run $VERSION: could not update LATEST"; exit 1; }
log "run $VERSION: done, LATEST -> versions/$VERSION"

# Retention: the newest KEEP versions (names sort by time), and always LATEST's.
mapfile -t versions < <(cd "$DEST/versions" && ls -1d [0-9]* 2>/dev/null | sort)
current="$(basename "$(readlink "$DEST/LATEST")")"
excess=$(( ${#versions[@]} - KEEP ))
for ((i = 0; i < excess; i++)); do
  [ "${versions[$i]}" = "$current" ] && continue
  log "removing old version ${versions[$i]}"
  rm -rf -- "$DEST/versions/${versions[$i]}"
done
exit 0
