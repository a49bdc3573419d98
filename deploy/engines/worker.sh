#!/usr/bin/env bash
# The command of --environment_type=PROCESS (convert-on.sh passes it in --environment_config):
# the runner starts it once per SDK worker with `--id=ID --provision_endpoint=HOST:PORT`. It
# runs the Python SDK's boot program (built by setup.sh; the entry point of Beam's and
# Dataflow's Python containers), which asks the provision service for the control, logging
# and artifact endpoints and the pipeline options, installs what the job staged, and starts
# `python -m apache_beam.runners.worker.sdk_worker_main` in a process of its own.
#
# The worker's Python is what a Dataflow worker gets: Beam's boot, unless
# RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT is set, makes a fresh venv for each worker
# (`python -m venv --system-site-packages /opt/apache/beam-venv/beam-venv-worker-ID` over the
# SDK container's Python, which has apache-beam installed) and pip-installs into it what the
# job staged: the SDK if staged, requirements.txt (--requirements_file), extra_packages.txt
# (--extra_package), workflow.tar.gz (--setup_file's sdist). Here there is no container, and
# boot's venv would sit over this machine's Python (whatever its site-packages hold), so
# worker.sh makes that venv itself and has boot install into it (RUN_PYTHON_SDK_IN_DEFAULT_
# ENVIRONMENT=1 then means "use the python on PATH": this venv):
#   - a fresh venv in the worker's own folder, `--without-pip`, no --system-site-packages;
#   - under it, the worker image setup.sh made (BEAM_WORKER_IMAGE: apache-beam[gcp] at the
#     SDK's version, pinned as Beam's container pins it), through a .pth that adds the image's
#     site-packages after the venv's own: what the container's site-packages are to boot's
#     --system-site-packages venv (pip sees the image's packages as installed, and installs
#     anything else, or another version, into the venv; the image is never written to);
#   - pip offline: PIP_NO_INDEX=1 and PIP_FIND_LINKS=BEAM_WORKER_WHEELS, the wheels setup.sh
#     resolved for setup.py over the image, so a worker start does not download tensorflow
#     (boot passes --no-cache-dir); PIP_NO_COMPILE=1 (modules compile as they are imported).
#   - nothing of the launcher: PYTHONPATH, PYTHONHOME and VIRTUAL_ENV are dropped, and the
#     worker starts in its own folder. beam-tfrecord and its dependencies are in the venv only
#     if the job staged them (convert-on.sh passes --setup_file); a dependency missing from
#     setup.py is missing here, as on Dataflow.
#
# Environment (convert-on.sh sets it through the environment config's "env"):
#   BEAM_BOOT            the boot binary (default: setup.sh's, for the SDK's version)
#   BEAM_WORKER_IMAGE    the worker image (a venv setup.sh made)
#   BEAM_WORKER_WHEELS   the wheels folder boot's pip installs from (offline); unset: PyPI
#   BEAM_WORKER_TMP      where each worker's folder (staged files, venv) is made (default TMPDIR)
#   BEAM_WORKER_DEPS     the dependencies layer (setup.sh worker; convert-on.sh --deps image):
#                        the packages setup.py needs, put under the venv before the image, so
#                        that boot's pip installs only the staged project (as with Dataflow's
#                        worker image, deploy/dataflow/Dockerfile.worker); unset: boot's pip
#                        installs them too, from the wheels
set -euo pipefail

: "${BEAM_WORKER_IMAGE:?BEAM_WORKER_IMAGE must name the worker image (setup.sh worker)}"
: "${BEAM_BOOT:?BEAM_BOOT must name the Python SDK boot binary, built by setup.sh}"
[ -f "$BEAM_WORKER_IMAGE/.complete" ] || { echo "worker.sh: no worker image at $BEAM_WORKER_IMAGE: run bash deploy/engines/setup.sh worker" >&2; exit 1; }

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
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV PYTHONSTARTUP PYTHONUSERBASE PYTHON_PATH
export PYTHONNOUSERSITE=1
"$BEAM_WORKER_IMAGE/bin/python" -m venv --without-pip "$semi/venv"
"$BEAM_WORKER_IMAGE/bin/python" -c '
import sys, sysconfig
layers = [d for d in sys.argv[1:] if d] + [sysconfig.get_path("purelib")]
print("import site; " + "; ".join("site.addsitedir(%r)" % d for d in layers))' "${BEAM_WORKER_DEPS:-}" \
  > "$("$semi/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/00-beam-worker-image.pth"
export VIRTUAL_ENV="$semi/venv" PATH="$semi/venv/bin:$PATH"
export RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1 PIP_NO_COMPILE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if [ -n "${BEAM_WORKER_WHEELS:-}" ]; then
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$BEAM_WORKER_WHEELS"
fi
# A watchdog beside boot (which takes this process's pid by exec). An SDK worker must not
# outlive what started it: when a Spark executor JVM dies (kill -9, a lost executor), its
# boot is orphaned, sees its harness lose the control channel, and restarts it (up to 4
# times, each waiting for an endpoint that is gone). So: when boot's parent changes (the
# runner's process died), boot gets SIGTERM (it forwards it to its harness process groups);
# and when boot itself is gone (a runner that ends it with SIGKILL), the harness process groups
# it had get SIGTERM, then SIGKILL.
parent=$PPID self=$$
(
  set +e   # a kill of a process already gone must not end the watchdog
  trap '' HUP INT
  ppid_of() { local stat; stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; stat=${stat##*) }; set -- $stat; echo "$2"; }
  kids="" told=0
  while [ -d "/proc/$self" ]; do
    now=$(ppid_of "$self") || break
    if [ "$now" != "$parent" ] && [ $told -lt 2 ]; then
      kill -TERM "$self" 2>/dev/null; told=$((told + 1))
    fi
    kids=$(pgrep -P "$self" 2>/dev/null | tr '\n' ' ') || true
    sleep 2
  done
  for k in $kids; do kill -TERM -- "-$k" 2>/dev/null; done
  sleep 5
  for k in $kids; do kill -KILL -- "-$k" 2>/dev/null; done
) </dev/null >/dev/null 2>&1 &
# boot writes pipeline_options.json into its working directory (which Prism leaves as the
# launcher's: a stray file in the user's folder), and a worker on Dataflow does not start in
# the launcher's folder either (a relative path that only works there should fail here too).
cd "$semi"
exec "$BEAM_BOOT" --semi_persist_dir="$semi" "${args[@]}"
