#!/usr/bin/env bash
# Runs `beam-tfrecord convert` on one of Beam's portable engines (issue 39).
#
#   bash deploy/engines/convert-on.sh ENGINE [--env process|loopback] [--master URL] \
#       -- CONVERT-ARGUMENTS...
#
#   ENGINE   prism: Beam's portable runner, started for the job (PrismRunner);
#            spark: a Spark cluster (SparkRunner: Beam's Spark job server, the jar setup.sh
#            spark fetched or assembled, started for the job as the Spark driver; its
#            executors on the cluster's workers run the stages). Start a local cluster with
#            `bash deploy/engines/cluster.sh start spark`.
#            flink: a Flink session cluster (FlinkRunner: Beam's Flink job server, the jar
#            setup.sh flink assembled, started for the job; it submits the job to the
#            cluster's JobManager, whose TaskManagers run the stages). Start a local cluster
#            with `bash deploy/engines/cluster.sh start flink`.
#   --master the Spark master (default $SPARK_MASTER_URL, else spark://127.0.0.1:7077,
#            cluster.sh's), or the Flink JobManager's REST address (default $FLINK_MASTER,
#            else 127.0.0.1:8091, cluster.sh's)
#   --run    SCRIPT: run that Python pipeline script (which takes Beam's options) with the
#            same runner and worker options, instead of convert (the tests' probes use it)
#   --env    the SDK harness's environment (default: process)
#            process   --environment_type=PROCESS: the runner starts each SDK worker as a
#                      process of its own (deploy/engines/worker.sh -> Beam's Python boot ->
#                      sdk_worker_main), as Dataflow Runner v2 does: DoFns, side inputs and
#                      coders cross a process boundary, each worker starts with fresh module
#                      state.
#            loopback  --environment_type=LOOPBACK: the harness runs inside the launching
#                      process (quick; hides what PROCESS shows).
#   --deps   where a PROCESS worker gets the packages setup.py declares (default: image)
#            image     preinstalled once (setup.sh worker's layer, resolved from the staged
#                      setup.py), under each worker's venv: boot's pip installs only the staged
#                      project, as on Dataflow with deploy/dataflow/Dockerfile.worker's image
#            staged    boot's pip installs them into each worker's venv with the project, as
#                      on Dataflow with Beam's stock image (~40 s a worker: tensorflow)
# Example:
#   bash deploy/engines/setup.sh
#   bash deploy/engines/convert-on.sh prism -- --format coco --input train=ann.json \
#       --images imgs --output out
#   bash deploy/engines/setup.sh spark && bash deploy/engines/cluster.sh start spark
#   bash deploy/engines/convert-on.sh spark -- --format coco --input train=ann.json \
#       --images imgs --output out
#
# On Prism and Spark the pipeline takes its distributed path (neither is one of Beam's local
# runners): the runner's shuffles, no spill files, the run directory through FileSystems.
#
# With --env process the job stages the project as a Dataflow job does: --setup_file (the
# repository's setup.py, or BEAM_TFRECORD_SETUP_FILE; a copy of its folder made for the run,
# so that runs launched at once do not build their sdists in one folder), whose sdist Beam's
# stager builds; each
# worker is a fresh venv (worker.sh) over Beam's SDK (the worker image setup.sh makes) into
# which boot pip-installs the staged sdist and the dependencies setup.py declares, from the
# wheels setup.sh resolved (offline). Nothing of the launcher's venv reaches the workers: a
# dependency missing from setup.py fails the job, as it would on Dataflow.
#
# Environment:
#   BEAM_TFRECORD_PYTHON  the Python that launches (default: the repository's
#                         .venv/bin/python): beam-tfrecord and apache-beam must be importable
#                         from it (PYTHONPATH is passed on to it, not to PROCESS workers).
#   BEAM_TFRECORD_SETUP_FILE  the setup.py the job stages (--env process; default the
#                         repository's)
#   BEAM_WORKER_IMAGE     the workers' image (default: setup.sh worker's, made if missing)
#   BEAM_WORKER_WHEELS    the wheels the workers' pip installs from, offline (default: the
#                         image's wheels folder; empty: the workers' pip uses PyPI)
#   BEAM_WORKER_DEPS      --deps image: the dependencies layer (default: setup.sh worker's)
#   ENGINES_CACHE         setup.sh's cache (default ~/.cache/beam-tfrecord/engines)
#   PRISM                 the prism binary (default: setup.sh's for the SDK's Beam version)
#   BEAM_BOOT             the Python SDK boot binary (default: setup.sh's, likewise)
#   SPARK_JOB_SERVER_JAR  the Spark job server jar (default: the one setup.sh spark chose for
#                         the SDK's version, named in $ENGINES_CACHE/spark/job-server-for-V)
#   SPARK_MASTER_URL      the Spark master (see --master)
#   FLINK_JOB_SERVER_JAR  the Flink job server jar (default: setup.sh flink's, named in
#                         $ENGINES_CACHE/flink/job-server-for-V)
#   FLINK_MASTER          the Flink JobManager (see --master)
#   STORAGE_EMULATOR_HOST a Cloud Storage emulator for gs:// (passed on to PROCESS workers,
#                         with NO_GCE_CHECK; the tests' emulator, or a local rehearsal)
# Exit status: convert's. The processes started for the job (Prism and its workers; Spark's
# job server) end with this script; on Spark the executors' SDK workers end with the job.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ENGINES_CACHE=${ENGINES_CACHE:-$HOME/.cache/beam-tfrecord/engines}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
die() { echo "convert-on.sh: $*" >&2; exit 2; }

[ $# -ge 1 ] || usage
ENGINE=$1; shift
ENV_TYPE=process
DEPS=image
RUN_SCRIPT=
MASTER=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --env) [ $# -ge 2 ] || usage; ENV_TYPE=$2; shift 2 ;;
    --env=*) ENV_TYPE=${1#--env=}; shift ;;
    --master) [ $# -ge 2 ] || usage; MASTER=$2; shift 2 ;;
    --master=*) MASTER=${1#--master=}; shift ;;
    --run) [ $# -ge 2 ] || usage; RUN_SCRIPT=$2; shift 2 ;;
    --deps) [ $# -ge 2 ] || usage; DEPS=$2; shift 2 ;;
    --deps=*) DEPS=${1#--deps=}; shift ;;
    --run=*) RUN_SCRIPT=${1#--run=}; shift ;;
    -h|--help) usage ;;
    *) die "unknown option $1 before -- (the convert arguments come after --)" ;;
  esac
done
[ "${1:-}" = "--" ] || usage
shift
case "$DEPS" in image|staged) ;; *) die "unknown --deps $DEPS (image or staged)" ;; esac

PY=${BEAM_TFRECORD_PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || die "no python at $PY (set BEAM_TFRECORD_PYTHON)"
BEAM_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("apache-beam"))') ||
  die "$PY has no apache-beam"

case "$ENGINE" in
  prism)
    PRISM=${PRISM:-$ENGINES_CACHE/prism/v$BEAM_VERSION/prism}
    [ -x "$PRISM" ] || die "no Prism for Beam $BEAM_VERSION at $PRISM: run bash deploy/engines/setup.sh"
    beam_args=(--runner=PrismRunner "--prism_location=$PRISM")
    engine_is=$PRISM ;;
  spark)
    MASTER=${MASTER:-${SPARK_MASTER_URL:-spark://127.0.0.1:7077}}
    if [ -z "${SPARK_JOB_SERVER_JAR:-}" ]; then
      pointer="$ENGINES_CACHE/spark/job-server-for-$BEAM_VERSION"
      [ -f "$pointer" ] || die "no Spark job server for Beam $BEAM_VERSION: run bash deploy/engines/setup.sh spark"
      SPARK_JOB_SERVER_JAR=$(cat "$pointer")
    fi
    [ -f "$SPARK_JOB_SERVER_JAR" ] || die "no Spark job server jar at $SPARK_JOB_SERVER_JAR: run bash deploy/engines/setup.sh spark"
    case "$MASTER" in
      spark://*:*) hostport=${MASTER#spark://}
        (exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}") 2>/dev/null ||
          die "no Spark master answers at $MASTER: bash deploy/engines/cluster.sh start spark (or --master URL)" ;;
      local*) ;;  # Spark inside the job server (no cluster)
      *) die "--master $MASTER: spark://HOST:PORT (or local[N])" ;;
    esac
    # SparkRunner starts `java -jar JAR --spark-master-url MASTER --job-port ...` (the Spark
    # driver) and stops it at the end; -Dspark.* properties of that JVM configure the job's
    # SparkContext. The driver's UI and progress bars are of no use here.
    beam_args=(--runner=SparkRunner "--spark_job_server_jar=$SPARK_JOB_SERVER_JAR"
               "--spark_master_url=$MASTER"
               --job_server_jvm_property=-Dspark.ui.enabled=false
               --job_server_jvm_property=-Dspark.ui.showConsoleProgress=false
               # each executor keeps its SDK worker for the whole job, as a Dataflow worker
               # does (Beam's default, 0, starts one per task: a Python start-up each time)
               --environment_cache_millis=600000)
    case "$MASTER" in
      # a cluster on this machine's loopback address: the driver there too (else Spark
      # advertises the machine's first network address to the executors)
      spark://127.0.0.1:*|spark://localhost:*|local*)
        beam_args+=(--job_server_jvm_property=-Dspark.driver.host=127.0.0.1
                    --job_server_jvm_property=-Dspark.driver.bindAddress=127.0.0.1) ;;
    esac
    engine_is="$SPARK_JOB_SERVER_JAR on $MASTER" ;;
  flink)
    MASTER=${MASTER:-${FLINK_MASTER:-127.0.0.1:8091}}
    if [ -z "${FLINK_JOB_SERVER_JAR:-}" ]; then
      pointer="$ENGINES_CACHE/flink/job-server-for-$BEAM_VERSION"
      [ -f "$pointer" ] || die "no Flink job server for Beam $BEAM_VERSION: run bash deploy/engines/setup.sh flink"
      FLINK_JOB_SERVER_JAR=$(cat "$pointer")
    fi
    [ -f "$FLINK_JOB_SERVER_JAR" ] || die "no Flink job server jar at $FLINK_JOB_SERVER_JAR: run bash deploy/engines/setup.sh flink"
    curl -fsS --max-time 5 "http://$MASTER/overview" >/dev/null 2>&1 ||
      die "no Flink JobManager answers at http://$MASTER: bash deploy/engines/cluster.sh start flink (or --master HOST:PORT)"
    # FlinkRunner starts `java -jar JAR --flink-master MASTER --job-port ...` for the job and
    # stops it at the end; the job goes to the cluster through the JobManager's REST API.
    # --flink_version: the runner in the jar (beam-runners-flink-1.19).
    flink_minor=$(basename "$FLINK_JOB_SERVER_JAR" | sed -n 's/^beam-runners-flink-\([0-9.]*\)-job-server-.*/\1/p')
    beam_args=(--runner=FlinkRunner "--flink_master=$MASTER"
               "--flink_job_server_jar=$FLINK_JOB_SERVER_JAR" "--flink_version=${flink_minor:-1.19}"
               --parallelism=2)
    # (each task starts an SDK worker of its own, ~8 s each here: --environment_cache_millis,
    # which keeps Spark's, changed nothing on Flink's batch tasks; measured 105 and 97 s for a
    # VOC job of 8 images)
    engine_is="$FLINK_JOB_SERVER_JAR on $MASTER" ;;
  *) die "unknown engine $ENGINE (known: prism, spark, flink)" ;;
esac

# One folder for this run's engine scratch (the workers' staged files), removed at the end.
RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/beam-tfrecord-engine.XXXXXX")

case "$ENV_TYPE" in
  loopback) beam_args+=(--environment_type=LOOPBACK) ;;
  process)
    BEAM_BOOT=${BEAM_BOOT:-$ENGINES_CACHE/python-boot/v$BEAM_VERSION/boot}
    [ -x "$BEAM_BOOT" ] || die "no Python SDK boot at $BEAM_BOOT: run bash deploy/engines/setup.sh"
    SETUP_FILE=${BEAM_TFRECORD_SETUP_FILE:-$REPO/setup.py}
    [ -f "$SETUP_FILE" ] || die "no setup file at $SETUP_FILE"
    # The workers' image, offline wheels and dependencies layer (setup.sh worker: made once,
    # and again for another setup.py; quick when there).
    if [ -z "${BEAM_WORKER_IMAGE:-}" ]; then
      made=$(BEAM_PYTHON="$PY" BEAM_VERSION="$BEAM_VERSION" BEAM_TFRECORD_SETUP_FILE="$SETUP_FILE" \
             bash "$HERE/setup.sh" worker 2>"$RUN_TMP/setup.log" | tail -2) &&
        BEAM_WORKER_IMAGE=$(echo "$made" | sed -n 1p) && layer=$(echo "$made" | sed -n 2p) &&
        [ -f "$BEAM_WORKER_IMAGE/.complete" ] && [ -f "$layer/.complete" ] ||
        { cat "$RUN_TMP/setup.log" >&2; rm -rf "$RUN_TMP"; die "no worker image: bash deploy/engines/setup.sh worker failed"; }
      [ "$DEPS" = image ] && BEAM_WORKER_DEPS=${BEAM_WORKER_DEPS:-$layer}
    fi
    [ "$DEPS" = image ] || BEAM_WORKER_DEPS=
    BEAM_WORKER_WHEELS=${BEAM_WORKER_WHEELS-$BEAM_WORKER_IMAGE-wheels}
    config=$("$PY" -c '
import json, os, sys
command, image, wheels, deps, boot, tmp = sys.argv[1:]
env = {"BEAM_WORKER_IMAGE": image, "BEAM_BOOT": boot, "BEAM_WORKER_TMP": tmp}
if wheels:
  env["BEAM_WORKER_WHEELS"] = wheels
if deps:
  env["BEAM_WORKER_DEPS"] = deps
# a Cloud Storage emulator the launcher uses (tests, local rehearsals), the workers use too
for name in ("STORAGE_EMULATOR_HOST", "NO_GCE_CHECK"):
  if os.environ.get(name):
    env[name] = os.environ[name]
print(json.dumps({"command": command, "env": env}))' \
      "$HERE/worker.sh" "$BEAM_WORKER_IMAGE" "$BEAM_WORKER_WHEELS" "${BEAM_WORKER_DEPS:-}" "$BEAM_BOOT" "$RUN_TMP")
    # What the job stages, as a Dataflow job would: the project's sdist (Beam's stager builds
    # it from setup.py), which boot pip-installs into each worker's fresh venv with the
    # dependencies setup.py declares.
    # The stager runs `setup.py sdist` in the setup file's folder, which makes a
    # beam-tfrecord-V/ tree and the egg-info there: two conversions launched at once raced on
    # them ("No such file or directory: 'beam-tfrecord-0.1.0/beam_tfrecord/storage'"). So the
    # job stages a copy of that folder made for this run (without what no sdist takes).
    mkdir "$RUN_TMP/project"
    tar -C "$(dirname "$SETUP_FILE")" -cf - --exclude=./.git --exclude=./.venv \
        --exclude=./tests --exclude=./benchmarks --exclude=./docs --exclude=./build \
        --exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ . |
      tar -C "$RUN_TMP/project" -xf - || die "could not copy $(dirname "$SETUP_FILE") to stage it"
    beam_args+=(--environment_type=PROCESS "--environment_config=$config"
                "--setup_file=$RUN_TMP/project/$(basename "$SETUP_FILE")") ;;
  *) die "unknown --env $ENV_TYPE (process or loopback)" ;;
esac

echo "convert-on.sh: $ENGINE (Beam $BEAM_VERSION, $ENV_TYPE): $engine_is" >&2
# The launcher in a process group of its own: Prism or Spark's job server, and the workers
# Prism starts, are in it too, so that nothing of the engine outlives this script, whatever
# way convert ends. (Spark's executors belong to the cluster: they end the job's SDK workers.)
set +e
if [ -n "$RUN_SCRIPT" ]; then
  setsid "$PY" "$RUN_SCRIPT" "$@" "${beam_args[@]}" &
else
  setsid "$PY" -m beam_tfrecord.cli convert "$@" "${beam_args[@]}" &
fi
pid=$!
trap 'kill -TERM -- "-$pid" 2>/dev/null' INT TERM
wait "$pid"
rc=$?
while [ $rc -gt 128 ] && kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done  # a trapped signal
kill -TERM -- "-$pid" 2>/dev/null && sleep 1 && kill -KILL -- "-$pid" 2>/dev/null
rm -rf "$RUN_TMP"
exit $rc
