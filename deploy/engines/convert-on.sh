#!/usr/bin/env bash
# Runs `beam-tfrecord convert` on one of Beam's portable engines (issue 39).
#
#   bash deploy/engines/convert-on.sh ENGINE [--env process|loopback] -- CONVERT-ARGUMENTS...
#
#   ENGINE   prism (spark and flink: a later part of issue 39)
#   --env    the SDK harness's environment (default: process)
#            process   --environment_type=PROCESS: the runner starts each SDK worker as a
#                      process of its own (deploy/engines/worker.sh -> Beam's Python boot ->
#                      sdk_worker_main), as Dataflow Runner v2 does: DoFns, side inputs and
#                      coders cross a process boundary, each worker starts with fresh module
#                      state.
#            loopback  --environment_type=LOOPBACK: the harness runs inside the launching
#                      process (quick; hides what PROCESS shows).
# Example:
#   bash deploy/engines/setup.sh
#   bash deploy/engines/convert-on.sh prism -- --format coco --input train=ann.json \
#       --images imgs --output out
#
# On Prism the pipeline takes its distributed path (the runner is not one of Beam's local
# runners): the runner's shuffles, no spill files, the run directory through FileSystems.
#
# KNOWN GAP (issue 39, item 2): the PROCESS workers run with the project's own Python
# (BEAM_TFRECORD_PYTHON, default the repository's .venv), not a virtualenv made from what the
# job stages (--setup_file etc.) as Dataflow's would be; see worker.sh.
#
# Environment:
#   BEAM_TFRECORD_PYTHON  the Python that launches (and, with PROCESS, runs the workers;
#                         default: the repository's .venv/bin/python). beam-tfrecord and
#                         apache-beam must be importable from it (PYTHONPATH is passed on).
#   ENGINES_CACHE         setup.sh's cache (default ~/.cache/beam-tfrecord/engines)
#   PRISM                 the prism binary (default: setup.sh's for the SDK's Beam version)
#   BEAM_BOOT             the Python SDK boot binary (default: setup.sh's, likewise)
# Exit status: convert's. The engine's processes (Prism, its workers) end with this script.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ENGINES_CACHE=${ENGINES_CACHE:-$HOME/.cache/beam-tfrecord/engines}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
die() { echo "convert-on.sh: $*" >&2; exit 2; }

[ $# -ge 1 ] || usage
ENGINE=$1; shift
ENV_TYPE=process
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --env) [ $# -ge 2 ] || usage; ENV_TYPE=$2; shift 2 ;;
    --env=*) ENV_TYPE=${1#--env=}; shift ;;
    -h|--help) usage ;;
    *) die "unknown option $1 before -- (the convert arguments come after --)" ;;
  esac
done
[ "${1:-}" = "--" ] || usage
shift

PY=${BEAM_TFRECORD_PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || die "no python at $PY (set BEAM_TFRECORD_PYTHON)"
BEAM_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("apache-beam"))') ||
  die "$PY has no apache-beam"

case "$ENGINE" in
  prism) ;;
  spark|flink) die "$ENGINE: not yet (issue 39, a later part); prism only for now" ;;
  *) die "unknown engine $ENGINE (known: prism)" ;;
esac

PRISM=${PRISM:-$ENGINES_CACHE/prism/v$BEAM_VERSION/prism}
[ -x "$PRISM" ] || die "no Prism for Beam $BEAM_VERSION at $PRISM: run bash deploy/engines/setup.sh"

# One folder for this run's engine scratch (the workers' staged files), removed at the end.
RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/beam-tfrecord-engine.XXXXXX")

beam_args=(--runner=PrismRunner "--prism_location=$PRISM")
case "$ENV_TYPE" in
  loopback) beam_args+=(--environment_type=LOOPBACK) ;;
  process)
    BEAM_BOOT=${BEAM_BOOT:-$ENGINES_CACHE/python-boot/v$BEAM_VERSION/boot}
    [ -x "$BEAM_BOOT" ] || die "no Python SDK boot at $BEAM_BOOT: run bash deploy/engines/setup.sh"
    config=$("$PY" -c '
import json, sys
command, python, boot, tmp = sys.argv[1:]
print(json.dumps({"command": command,
                  "env": {"BEAM_WORKER_PYTHON": python, "BEAM_BOOT": boot,
                          "BEAM_WORKER_TMP": tmp}}))' \
      "$HERE/worker.sh" "$PY" "$BEAM_BOOT" "$RUN_TMP")
    beam_args+=(--environment_type=PROCESS "--environment_config=$config") ;;
  *) die "unknown --env $ENV_TYPE (process or loopback)" ;;
esac

echo "convert-on.sh: $ENGINE (Beam $BEAM_VERSION, $ENV_TYPE): $PRISM" >&2
# The launcher in a process group of its own: Prism and the workers it starts are in it too,
# so that nothing of the engine outlives this script, whatever way convert ends.
set +e
setsid "$PY" -m beam_tfrecord.cli convert "$@" "${beam_args[@]}" &
pid=$!
trap 'kill -TERM -- "-$pid" 2>/dev/null' INT TERM
wait "$pid"
rc=$?
while [ $rc -gt 128 ] && kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done  # a trapped signal
kill -TERM -- "-$pid" 2>/dev/null && sleep 1 && kill -KILL -- "-$pid" 2>/dev/null
rm -rf "$RUN_TMP"
exit $rc
