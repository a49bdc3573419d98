#!/usr/bin/env bash
# The command of --environment_type=PROCESS (convert-on.sh passes it in --environment_config):
# the runner starts it once per SDK worker with `--id=ID --provision_endpoint=HOST:PORT`. It
# runs the Python SDK's boot program (built by setup.sh; the entry point of Beam's and
# Dataflow's Python containers), which asks the provision service for the control, logging
# and artifact endpoints and the pipeline options, installs what the job staged, and starts
# `python -m apache_beam.runners.worker.sdk_worker_main` in a process of its own.
#
# Environment (convert-on.sh sets it through the environment config's "env"):
#   BEAM_BOOT            the boot binary (default: setup.sh's, for the SDK's version)
#   BEAM_WORKER_PYTHON   the Python the harness runs with: its bin/ goes first on PATH, where
#                        boot looks for `python`.
#   BEAM_WORKER_TMP      where each worker's semi-persistent folder is made (default TMPDIR)
#
# KNOWN GAP (issue 39, item 2): for now the worker Python is the project's own venv
# (beam-tfrecord installed in it), and RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 makes boot use
# it as it is, instead of a fresh virtualenv made from what the job stages (--setup_file /
# --requirements_file / a wheel) as on Dataflow. A dependency missing from setup.py does not
# fail here yet. Do not add --setup_file while this holds: boot would pip-install the staged
# package into that venv.
set -euo pipefail

: "${BEAM_WORKER_PYTHON:?BEAM_WORKER_PYTHON must name the python of the workers}"
: "${BEAM_BOOT:?BEAM_BOOT must name the Python SDK boot binary, built by setup.sh}"

PATH="$(dirname "$BEAM_WORKER_PYTHON"):$PATH"
export PATH
export RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1
# boot's own default is /tmp (staged files in /tmp/staged, shared by every worker and job):
# one folder per worker instead, inside BEAM_WORKER_TMP (convert-on.sh removes it at the end).
# exec: the runner stops a worker by killing this process, which must then be boot itself.
# Prism 2.77 passes --id='ID' with the quotes inside the argument (no shell removes them), and
# its provision service then finds no worker "'ID'": "... read from context metadata but not
# registered in worker pool". The quotes are taken off here.
args=()
for a in "$@"; do
  case "$a" in
    --id=\'*\') a="--id=${a#--id=\'}"; a=${a%\'} ;;
  esac
  args+=("$a")
done
semi=$(mktemp -d "${BEAM_WORKER_TMP:-${TMPDIR:-/tmp}}/worker.XXXXXX")
# boot writes pipeline_options.json into its working directory (which Prism leaves as the
# launcher's: a stray file in the user's folder), and a worker on Dataflow does not start in
# the launcher's folder either (a relative path that only works there should fail here too).
cd "$semi"
exec "$BEAM_BOOT" --semi_persist_dir="$semi" "${args[@]}"
