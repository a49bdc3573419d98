#!/usr/bin/env bash
# Scheduled beam-tfrecord conversion, for cron. Each run is one versioned conversion,
#   beam-tfrecord convert CONVERT-OPTIONS --append --output DEST --keep K --retain-hours H
#                         [--compact]
# which makes or extends DEST:
#   DEST/LATEST              a one-line file, e.g. `versions/00000003`: the published version
#   DEST/versions/00000003/  shards, label_map.pbtxt, manifest.json, errors-*.jsonl
# The tool compares the sources with LATEST's version, appends added images as new shards,
# shares unchanged shards with the version before (hard links), checks the new version and
# only then writes LATEST; unchanged sources publish nothing (logged as skipped). It keeps the
# newest K versions (always LATEST's), and any that was LATEST less than H hours ago (a
# training job may still read it). A killed or failed run leaves LATEST as it was.
# Runs of this wrapper never overlap (flock on DEST/.lock: a second one logs "already running"
# and exits 0; so does a run that finds DEST locked by another live conversion).
# A DEST made by the earlier wrapper (LATEST a symlink to versions/<date>) is taken over: the
# symlink is removed (never followed), the next version is a full conversion, and the old
# dated versions are left for you to delete.
#
#   beam-tfrecord-cron.sh --dest DIR [--keep K] [--retain-hours H] [--log FILE] [--full]
#                         -- CONVERT-OPTIONS...
#
#   CONVERT-OPTIONS  everything `beam-tfrecord convert` takes except --output, --overwrite,
#                    --append, --keep, --retain-hours and --if-changed, Beam
#                    options included, e.g. --format coco --input train=/data/train.json ...
#   --dest DIR       the versioned output (a local directory)
#   --keep K         versions to keep (default 5)
#   --retain-hours H never delete a version LATEST less than H hours ago (default 24)
#   --log FILE       append the log here (default DEST/logs/cron.log)
#   --full           a full version with a fresh shard plan (convert --compact)
#   --force          the same as --full (kept for old crontabs)
# Exit status: 0 converted, skipped (unchanged) or already running; else convert's status
# (1 for setup errors); LATEST then still names the last version that was published.
# Environment: BEAM_TFRECORD, the command to run (default: `beam-tfrecord` on PATH, else this
# repository's .venv/bin/python -m beam_tfrecord.cli).
set -uo pipefail

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" | sed '/^set /d' >&2; exit 2; }

DEST="" KEEP=5 RETAIN=24 LOG="" FULL=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    --dest) DEST="$2"; shift 2 ;;
    --dest=*) DEST="${1#*=}"; shift ;;
    --keep) KEEP="$2"; shift 2 ;;
    --keep=*) KEEP="${1#*=}"; shift ;;
    --retain-hours) RETAIN="$2"; shift 2 ;;
    --retain-hours=*) RETAIN="${1#*=}"; shift ;;
    --log) LOG="$2"; shift 2 ;;
    --log=*) LOG="${1#*=}"; shift ;;
    --full|--force) FULL=1; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "beam-tfrecord-cron: unknown option $1 (convert options go after --)" >&2; exit 2 ;;
  esac
done
[ -n "$DEST" ] && [ "$#" -gt 0 ] || usage
case "$DEST" in *://*)
  echo "beam-tfrecord-cron: --dest must be a local directory (flock); for $DEST run" \
       "\`beam-tfrecord convert --append\` itself" >&2; exit 2 ;; esac
case "$KEEP" in ''|*[!0-9]*|0) echo "beam-tfrecord-cron: --keep must be a positive number" >&2; exit 2 ;; esac
case "$RETAIN" in ''|*[!0-9.]*|*.*.*) echo "beam-tfrecord-cron: --retain-hours must be a number of hours" >&2; exit 2 ;; esac
# The wrapper sets these. convert accepts abbreviations (--out for --output), so any option
# that a refused name starts with is refused too.
SET_BY_WRAPPER=(output overwrite append keep retain-hours if-changed)
for arg in "$@"; do
  case "$arg" in --?*) ;; *) continue ;; esac
  name="${arg%%=*}"
  name="${name#--}"
  for own in "${SET_BY_WRAPPER[@]}"; do
    case "$own" in "$name"*)
      echo "beam-tfrecord-cron: $arg is set by the wrapper (--$own; see --help)" >&2; exit 2 ;;
    esac
  done
done

mkdir -p "$DEST" || exit 1
DEST="$(cd "$DEST" && pwd)"
LOG="${LOG:-$DEST/logs/cron.log}"
mkdir -p "$(dirname "$LOG")" || exit 1

log() { printf '%s [%s] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$$" "$*" | tee -a "$LOG" >&2; }

# What DEST/LATEST names (read as a plain file, never through a link), or "none".
latest() {
  local line=""
  if [ -f "$DEST/LATEST" ] && [ ! -L "$DEST/LATEST" ]; then
    IFS= read -r line <"$DEST/LATEST"
  fi
  printf '%s' "${line:-none}"
}

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
  log "interrupted by SIG$1; stopping the conversion"
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
  log "interrupted: LATEST is $(latest)"
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

# Taking over a DEST of the earlier wrapper (we hold the lock, so none of its runs is going).
# Its unfinished runs were DEST/versions/.inprogress-<date>: remove them.
for stale in "$DEST"/versions/.inprogress-*; do
  [ -e "$stale" ] || [ -L "$stale" ] || continue
  log "removing the earlier wrapper's unfinished run $stale"
  rm -rf -- "$stale"
done
# Its LATEST was a symlink to versions/<date>: remove the link itself (never follow it). Any
# other link is not ours: refused, nothing changed.
if [ -L "$DEST/LATEST" ]; then
  target="$(readlink -- "$DEST/LATEST")"
  if [[ "$target" =~ ^versions/[0-9]{8}T[0-9]{6}Z(-[0-9]+)?$ ]]; then
    rm -f -- "$DEST/LATEST" || exit 1
    log "removed the earlier wrapper's LATEST symlink (-> $target): the next version is a" \
        "full conversion; the old dated versions in $DEST/versions are left for you to delete"
  else
    log "LATEST is a symlink to $target, not the earlier wrapper's versions/<date>; nothing" \
        "changed (remove it or choose another --dest)"
    exit 1
  fi
fi

COMPACT=()
[ "$FULL" = 1 ] && COMPACT=(--compact)
before="$(latest)"
log "run: ${TOOL[*]} convert $* --append --output $DEST --keep $KEEP --retain-hours $RETAIN ${COMPACT[*]}"
offset="$(wc -c <"$LOG")"
run "${TOOL[@]}" convert "$@" --append --output "$DEST" --keep "$KEEP" \
  --retain-hours "$RETAIN" "${COMPACT[@]}"
status=$?
said="$(tail -c "+$((offset + 1))" -- "$LOG")"  # what the conversion printed
if [ "$status" -ne 0 ]; then
  # exit 2 and the tool's word that a live run holds DEST (not a dead run's lock on another
  # host, which needs a person and --break-lock: that one fails)
  live="already running|locked by .*still running|writing its lock right now"
  if [ "$status" -eq 2 ] && grep -qiE "$live" <<<"$said"; then
    log "already running (the conversion found $DEST locked by another live run); exiting"
    exit 0
  fi
  log "convert failed with status $status; LATEST is $(latest)"
  exit "$status"
fi
if grep -q "^unchanged:" <<<"$said"; then
  log "sources unchanged; skipped (nothing published, LATEST is $(latest))"
  exit 0
fi
after="$(latest)"
if [ "$after" = "$before" ]; then
  log "convert exited 0 but published nothing; LATEST is $after"
  exit 0
fi
log "done, LATEST is $after"
exit 0
