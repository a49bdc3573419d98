#!/usr/bin/env bash
# Starts or stops a local standalone cluster of one of Beam's cluster engines (issue 39).
#
#   bash deploy/engines/cluster.sh start|stop|status spark
#
# spark: a standalone Spark cluster of pyspark's Spark (setup.sh spark installs it): one
# master and two workers, each a JVM of its own (Spark's sbin/spark-daemon.sh, as Spark's
# start-master.sh / start-worker.sh run it), on this machine's loopback address:
#   master   spark://127.0.0.1:$SPARK_MASTER_PORT (7077), web UI :$SPARK_MASTER_WEBUI_PORT (8080)
#   workers  instances 1 and 2, $SPARK_WORKER_CORES core(s) and $SPARK_WORKER_MEMORY each,
#            web UIs :8081 and :8082, each with its own work folder (executors, their logs and
#            the jars a job stages)
# Logs, pid files and work folders: $ENGINES_RUN/spark (default
# ~/.cache/beam-tfrecord/engines/run/spark): logs/ (Spark's daemon logs), pids/, work-1/,
# work-2/. `start` waits until the master counts both workers ALIVE (exit 1 after 90 s, with
# the logs' last lines); a cluster already running is left as it is. `stop` stops the
# daemons named by those pid files only (a worker stops its executors, an executor its SDK
# harness processes), then removes the work folders (the staged job server jars: 300 MB a
# job and executor). `status` prints the master's view (exit 1 when not running).
#
# Then: bash deploy/engines/convert-on.sh spark -- CONVERT-ARGUMENTS...
#
# Environment:
#   ENGINES_CACHE           setup.sh's cache (default ~/.cache/beam-tfrecord/engines)
#   ENGINES_RUN             where the run folders go (default $ENGINES_CACHE/run)
#   SPARK_VERSION           the pyspark setup.sh installed (default 3.5.0)
#   SPARK_HOME              instead of setup.sh's pyspark
#   SPARK_MASTER_PORT, SPARK_MASTER_WEBUI_PORT, SPARK_WORKER_WEBUI_PORT (first worker's;
#   the second's is one more), SPARK_WORKER_CORES (1), SPARK_WORKER_MEMORY (2g)
set -euo pipefail

ENGINES_CACHE=${ENGINES_CACHE:-$HOME/.cache/beam-tfrecord/engines}
ENGINES_RUN=${ENGINES_RUN:-$ENGINES_CACHE/run}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ $# -eq 2 ] || usage
ACTION=$1 ENGINE=$2
case "$ACTION" in start|stop|status) ;; *) usage ;; esac
case "$ENGINE" in
  spark) ;;
  flink) die "flink: not yet (issue 39, a later part)" ;;
  prism) die "prism needs no cluster: convert-on.sh prism starts one per job" ;;
  *) die "unknown engine $ENGINE (known: spark)" ;;
esac

SPARK_VERSION=${SPARK_VERSION:-3.5.0}
SPARK_HOME=${SPARK_HOME:-$ENGINES_CACHE/spark/pyspark-$SPARK_VERSION/pyspark}
[ -f "$SPARK_HOME/sbin/spark-daemon.sh" ] ||
  die "no Spark at $SPARK_HOME: run bash deploy/engines/setup.sh spark"
RUN="$ENGINES_RUN/spark"
HOST=127.0.0.1
MASTER_PORT=${SPARK_MASTER_PORT:-7077}
MASTER_UI=${SPARK_MASTER_WEBUI_PORT:-8080}
WORKER_UI=${SPARK_WORKER_WEBUI_PORT:-8081}
WORKERS=2
MASTER_CLASS=org.apache.spark.deploy.master.Master
WORKER_CLASS=org.apache.spark.deploy.worker.Worker

# Spark's scripts read these: the daemons' logs and pid files in the run folder (not
# $SPARK_HOME/logs and /tmp), and under a name of their own (pid files are
# spark-$SPARK_IDENT_STRING-CLASS-N.pid), so that `stop` finds only what `start` started.
export SPARK_HOME SPARK_LOG_DIR="$RUN/logs" SPARK_PID_DIR="$RUN/pids"
export SPARK_IDENT_STRING=beam-tfrecord SPARK_LOCAL_IP=$HOST SPARK_MASTER_HOST=$HOST
export SPARK_CONF_DIR="$RUN/conf"
# Spark's daemons print Java's path; pyspark's scripts find `java` on PATH or in JAVA_HOME.
command -v java >/dev/null || [ -n "${JAVA_HOME:-}" ] || die "java is not on PATH and JAVA_HOME is unset"

pid_file() { echo "$SPARK_PID_DIR/spark-$SPARK_IDENT_STRING-$1-$2.pid"; }
alive() {  # CLASS N: is the daemon of that pid file running (and a java process)?
  local f pid
  f=$(pid_file "$1" "$2")
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && ps -ww -p "$pid" -o args= | grep -q "$1"  # -ww: no 80-column cut
}

master_json() { curl -fsS --max-time 5 "http://$HOST:$MASTER_UI/json/" 2>/dev/null; }
alive_workers() {
  master_json | python3 -c '
import json, sys
try:
  print(sum(w.get("state") == "ALIVE" for w in json.load(sys.stdin).get("workers", [])))
except ValueError:
  print(0)'
}

daemon() { "$SPARK_HOME/sbin/spark-daemon.sh" "$@" >&2; }

start() {
  mkdir -p "$RUN/logs" "$RUN/pids" "$SPARK_CONF_DIR"
  # Worker options: finished applications' folders (their staged jars) go after an hour.
  cat > "$SPARK_CONF_DIR/spark-env.sh" <<EOF
# written by deploy/engines/cluster.sh
SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=600 -Dspark.worker.cleanup.appDataTtl=3600"
EOF
  if alive "$MASTER_CLASS" 1; then
    log "spark master already running (pid $(cat "$(pid_file "$MASTER_CLASS" 1)"))"
  else
    log "starting the spark master on spark://$HOST:$MASTER_PORT (web UI http://$HOST:$MASTER_UI)"
    daemon start "$MASTER_CLASS" 1 --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI"
  fi
  local i
  for i in $(seq 1 $WORKERS); do
    if alive "$WORKER_CLASS" "$i"; then
      log "spark worker $i already running (pid $(cat "$(pid_file "$WORKER_CLASS" "$i")"))"
      continue
    fi
    mkdir -p "$RUN/work-$i"
    log "starting spark worker $i (${SPARK_WORKER_CORES:-1} core, ${SPARK_WORKER_MEMORY:-2g}, web UI :$((WORKER_UI + i - 1)), $RUN/work-$i)"
    daemon start "$WORKER_CLASS" "$i" --host "$HOST" --webui-port "$((WORKER_UI + i - 1))" \
      --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-2g}" \
      --work-dir "$RUN/work-$i" "spark://$HOST:$MASTER_PORT"
  done
  local t0=$SECONDS n=0
  while [ $((SECONDS - t0)) -lt 90 ]; do
    n=$(alive_workers)
    [ "$n" -ge $WORKERS ] && break
    sleep 2
  done
  if [ "$n" -lt $WORKERS ]; then
    log "the master counts $n ALIVE worker(s) of $WORKERS after 90 s; the logs end:"
    tail -n 15 "$RUN"/logs/*.out >&2 || true
    exit 1
  fi
  log "spark cluster up: spark://$HOST:$MASTER_PORT, $n workers ($RUN)"
  echo "spark://$HOST:$MASTER_PORT"
}

stop() {
  local i stopped=0 pid
  for i in $(seq 1 $WORKERS); do
    if alive "$WORKER_CLASS" "$i"; then
      pid=$(cat "$(pid_file "$WORKER_CLASS" "$i")")
      daemon stop "$WORKER_CLASS" "$i"; stopped=$((stopped + 1))
      wait_gone "$pid"
    fi
  done
  if alive "$MASTER_CLASS" 1; then
    pid=$(cat "$(pid_file "$MASTER_CLASS" 1)")
    daemon stop "$MASTER_CLASS" 1; stopped=$((stopped + 1))
    wait_gone "$pid"
  fi
  # a pid file is removed only when its process is gone (spark-daemon.sh removes its own)
  local f left=0
  for f in "$SPARK_PID_DIR"/spark-"$SPARK_IDENT_STRING"-*.pid; do
    [ -f "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then
      log "still running: pid $(cat "$f") of $f"; left=$((left + 1))
    else
      rm -f "$f"
    fi
  done
  [ $left -eq 0 ] || die "$left process(es) named by pid files still run; not stopped"
  rm -rf "$RUN"/work-* 2>/dev/null || true
  log "stopped $stopped spark daemon(s) (logs kept in $RUN/logs)"
}

wait_gone() {  # PID: spark-daemon.sh stop sends TERM; a daemon still there after 30 s gets KILL
  local t0=$SECONDS
  while kill -0 "$1" 2>/dev/null; do
    if [ $((SECONDS - t0)) -ge 30 ]; then kill -KILL "$1" 2>/dev/null || true; break; fi
    sleep 1
  done
}

status() {
  local json
  json=$(master_json) || { log "no spark master answers on http://$HOST:$MASTER_UI"; exit 1; }
  python3 -c '
import json, sys
m = json.loads(sys.argv[1])
print("master", m.get("url"), m.get("status"))
for w in m.get("workers", []):
  print("worker", w.get("id"), w.get("state"), "cores", w.get("cores"), "memory", w.get("memory"))
for a in m.get("activeapps", []):
  print("running", a.get("id"), a.get("name"))' "$json"
}

"$ACTION"
