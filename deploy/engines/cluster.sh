#!/usr/bin/env bash
# Starts or stops a local standalone cluster of one of Beam's cluster engines (issue 39).
#
#   bash deploy/engines/cluster.sh start|stop|status spark|flink
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
# flink: a standalone Flink session cluster of the Flink setup.sh flink unpacked (PyPI's
# apache-flink-libraries: Flink's jars, no scripts): one JobManager and two TaskManagers, each
# a JVM of its own, started as Flink's jobmanager.sh / taskmanager.sh would start them (the
# TaskManagers' memory options from Flink's BashJavaUtils), on the loopback address:
#   JobManager    REST and web UI http://127.0.0.1:$FLINK_REST_PORT (8091; Spark's UIs hold
#                 8080-8082), RPC :$FLINK_RPC_PORT (6123)
#   TaskManagers  1 and 2, one slot each, $FLINK_TM_MEMORY (2048m) each, each with its own
#                 temporary folder
# Configuration, logs, pid files and temporary folders: $ENGINES_RUN/flink (conf/, logs/,
# pids/, work-1/, work-2/). `start` waits until the JobManager counts both TaskManagers (exit
# 1 after 90 s, with the logs' last lines); `stop` stops the JVMs of those pid files only.
#
# Then: bash deploy/engines/convert-on.sh spark|flink -- CONVERT-ARGUMENTS...
#
# Environment:
#   ENGINES_CACHE           setup.sh's cache (default ~/.cache/beam-tfrecord/engines)
#   ENGINES_RUN             where the run folders go (default $ENGINES_CACHE/run)
#   SPARK_VERSION           the pyspark setup.sh installed (default 3.5.0)
#   SPARK_HOME              instead of setup.sh's pyspark
#   SPARK_MASTER_PORT, SPARK_MASTER_WEBUI_PORT, SPARK_WORKER_WEBUI_PORT (first worker's;
#   the second's is one more), SPARK_WORKER_CORES (1), SPARK_WORKER_MEMORY (2g)
#   FLINK_VERSION           the Flink setup.sh flink unpacked (default 1.19.0)
#   FLINK_HOME              instead of setup.sh's (lib/ and bash-java-utils.jar)
#   FLINK_REST_PORT (8091), FLINK_RPC_PORT (6123), FLINK_TM_MEMORY (2048m)
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
  spark|flink) ;;
  prism) die "prism needs no cluster: convert-on.sh prism starts one per job" ;;
  *) die "unknown engine $ENGINE (known: spark, flink)" ;;
esac
HOST=127.0.0.1
WORKERS=2
command -v java >/dev/null || [ -n "${JAVA_HOME:-}" ] || die "java is not on PATH and JAVA_HOME is unset"

await_workers() {  # COUNT-COMMAND WHAT LOG-GLOB: until COUNT-COMMAND prints >= $WORKERS,
  # at most 90 s; else the logs' last lines and exit 1. Prints the count.
  local t0=$SECONDS n=0
  while [ $((SECONDS - t0)) -lt 90 ]; do
    n=$($1)
    [ "$n" -ge $WORKERS ] && break
    sleep 2
  done
  if [ "$n" -lt $WORKERS ]; then
    log "$2 $n of $WORKERS after 90 s; the logs end:"
    tail -n 15 $3 >&2 || true
    exit 1
  fi
  echo "$n"
}

wait_gone() {  # PID: a daemon still there 30 s after TERM gets KILL
  local t0=$SECONDS
  while kill -0 "$1" 2>/dev/null; do
    if [ $((SECONDS - t0)) -ge 30 ]; then kill -KILL "$1" 2>/dev/null || true; break; fi
    sleep 1
  done
}

spark_env() {

SPARK_VERSION=${SPARK_VERSION:-3.5.0}
SPARK_HOME=${SPARK_HOME:-$ENGINES_CACHE/spark/pyspark-$SPARK_VERSION/pyspark}
[ -f "$SPARK_HOME/sbin/spark-daemon.sh" ] ||
  die "no Spark at $SPARK_HOME: run bash deploy/engines/setup.sh spark"
RUN="$ENGINES_RUN/spark"
MASTER_PORT=${SPARK_MASTER_PORT:-7077}
MASTER_UI=${SPARK_MASTER_WEBUI_PORT:-8080}
WORKER_UI=${SPARK_WORKER_WEBUI_PORT:-8081}
MASTER_CLASS=org.apache.spark.deploy.master.Master
WORKER_CLASS=org.apache.spark.deploy.worker.Worker

# Spark's scripts read these: the daemons' logs and pid files in the run folder (not
# $SPARK_HOME/logs and /tmp), and under a name of their own (pid files are
# spark-$SPARK_IDENT_STRING-CLASS-N.pid), so that `stop` finds only what `start` started.
export SPARK_HOME SPARK_LOG_DIR="$RUN/logs" SPARK_PID_DIR="$RUN/pids"
export SPARK_IDENT_STRING=beam-tfrecord SPARK_LOCAL_IP=$HOST SPARK_MASTER_HOST=$HOST
export SPARK_CONF_DIR="$RUN/conf"
}

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

spark_start() {
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
  local n
  n=$(await_workers alive_workers "the master counts ALIVE workers:" "$RUN/logs/*.out")
  log "spark cluster up: spark://$HOST:$MASTER_PORT, $n workers ($RUN)"
  echo "spark://$HOST:$MASTER_PORT"
}

spark_stop() {
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

spark_status() {
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

# ---------------------------------------------------------------------------------- flink
flink_env() {
FLINK_VERSION=${FLINK_VERSION:-1.19.0}
FLINK_HOME=${FLINK_HOME:-$ENGINES_CACHE/flink/flink-$FLINK_VERSION}
[ -f "$FLINK_HOME/bash-java-utils.jar" ] && [ -d "$FLINK_HOME/lib" ] ||
  die "no Flink at $FLINK_HOME: run bash deploy/engines/setup.sh flink"
RUN="$ENGINES_RUN/flink"
REST_PORT=${FLINK_REST_PORT:-8091}
RPC_PORT=${FLINK_RPC_PORT:-6123}
JM_CLASS=org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint
TM_CLASS=org.apache.flink.runtime.taskexecutor.TaskManagerRunner
# what Flink 1.19's default configuration gives its JVMs on Java 17 (env.java.opts.all)
JAVA_OPENS=(--add-exports=java.base/sun.net.util=ALL-UNNAMED
  --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED)
}

flink_alive() {  # NAME CLASS: is the JVM of pids/NAME.pid running?
  local f="$RUN/pids/$1.pid" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  kill -0 "$pid" 2>/dev/null && ps -ww -p "$pid" -o args= | grep -q "$2"
}

flink_overview() { curl -fsS --max-time 5 "http://$HOST:$REST_PORT/overview" 2>/dev/null; }
flink_taskmanagers() {
  { flink_overview || true; } | python3 -c 'import json, sys
try:
  print(json.load(sys.stdin).get("taskmanagers", 0))
except ValueError:
  print(0)'
}

flink_jvm() {  # NAME CLASS JVM-OPTIONS... -- PROGRAM-ARGUMENTS...: a daemon JVM and its pid file
  local name=$1 class=$2 opts=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  setsid nohup java "${opts[@]}" "${JAVA_OPENS[@]}" "-Dlog.file=$RUN/logs/$name.log" \
    "-Dlog4j.configurationFile=file:$RUN/conf/log4j.properties" -cp "$FLINK_HOME/lib/*" \
    "$class" --configDir "$RUN/conf" "$@" > "$RUN/logs/$name.out" 2>&1 < /dev/null &
  echo $! > "$RUN/pids/$name.pid"
}

flink_start() {
  mkdir -p "$RUN/conf" "$RUN/logs" "$RUN/pids"
  cat > "$RUN/conf/flink-conf.yaml" <<CONF
# written by deploy/engines/cluster.sh
jobmanager.rpc.address: $HOST
jobmanager.rpc.port: $RPC_PORT
jobmanager.bind-host: $HOST
jobmanager.memory.process.size: 1024m
rest.address: $HOST
rest.bind-address: $HOST
rest.port: $REST_PORT
taskmanager.bind-host: $HOST
taskmanager.host: $HOST
taskmanager.numberOfTaskSlots: 1
taskmanager.memory.process.size: ${FLINK_TM_MEMORY:-2048m}
# a batch job deploys several of its stages at once in one slot, each asking its network
# buffers: at Flink's default (10%, 5,079 buffers) YOLO's source stage was refused ("required
# 512, but only 441 available"; seen from commit 4cb0cd5 on)
taskmanager.memory.network.fraction: 0.2
parallelism.default: $WORKERS
CONF
  cat > "$RUN/conf/log4j.properties" <<'CONF'
# written by deploy/engines/cluster.sh: each JVM logs to its own file (-Dlog.file)
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
CONF
  if flink_alive jobmanager "$JM_CLASS"; then
    log "flink jobmanager already running (pid $(cat "$RUN/pids/jobmanager.pid"))"
  else
    log "starting the flink jobmanager (REST and web UI http://$HOST:$REST_PORT)"
    flink_jvm jobmanager "$JM_CLASS" -Xmx768m --
  fi
  # a TaskManager's JVM options and memory settings, as Flink's taskmanager.sh gets them
  local out jvm dyn i
  out=$(java -cp "$FLINK_HOME/bash-java-utils.jar:$FLINK_HOME/lib/*" \
        org.apache.flink.runtime.util.bash.BashJavaUtils GET_TM_RESOURCE_PARAMS \
        --configDir "$RUN/conf" 2>/dev/null | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p') ||
    die "BashJavaUtils failed: Flink's TaskManager memory options cannot be computed"
  jvm=$(echo "$out" | sed -n 1p); dyn=$(echo "$out" | sed -n 2p)
  [ -n "$jvm" ] && [ -n "$dyn" ] || die "BashJavaUtils gave no TaskManager options"
  for i in $(seq 1 $WORKERS); do
    if flink_alive "taskmanager-$i" "$TM_CLASS"; then
      log "flink taskmanager $i already running (pid $(cat "$RUN/pids/taskmanager-$i.pid"))"
      continue
    fi
    mkdir -p "$RUN/work-$i"
    log "starting flink taskmanager $i (1 slot, ${FLINK_TM_MEMORY:-2048m}, $RUN/work-$i)"
    # shellcheck disable=SC2086  # BashJavaUtils' options, one word each
    flink_jvm "taskmanager-$i" "$TM_CLASS" $jvm -- $dyn -D "io.tmp.dirs=$RUN/work-$i"
  done
  local n
  n=$(await_workers flink_taskmanagers "the jobmanager counts taskmanagers:" "$RUN/logs/*.log")
  log "flink cluster up: $HOST:$REST_PORT, $n taskmanagers ($RUN)"
  echo "$HOST:$REST_PORT"
}

flink_stop() {
  local name class stopped=0 pid left=0
  for name in taskmanager-2 taskmanager-1 jobmanager; do
    class=$TM_CLASS; [ "$name" = jobmanager ] && class=$JM_CLASS
    if flink_alive "$name" "$class"; then
      pid=$(cat "$RUN/pids/$name.pid")
      kill -TERM "$pid" 2>/dev/null || true
      wait_gone "$pid"; stopped=$((stopped + 1))
    fi
    if [ -f "$RUN/pids/$name.pid" ]; then
      if flink_alive "$name" "$class"; then
        log "still running: $name"; left=$((left + 1))
      else
        rm -f "$RUN/pids/$name.pid"
      fi
    fi
  done
  [ $left -eq 0 ] || die "$left flink JVM(s) still run; not stopped"
  rm -rf "$RUN"/work-* 2>/dev/null || true
  log "stopped $stopped flink JVM(s) (logs kept in $RUN/logs)"
}

flink_status() {
  local json
  json=$(flink_overview) || { log "no flink jobmanager answers on http://$HOST:$REST_PORT"; exit 1; }
  python3 -c '
import json, sys
o = json.loads(sys.argv[1])
print("jobmanager", sys.argv[2], "flink", o.get("flink-version"), "taskmanagers", o.get("taskmanagers"),
      "slots", o.get("slots-total"), "running", o.get("jobs-running"),
      "finished", o.get("jobs-finished"), "failed", o.get("jobs-failed"))' "$json" "$HOST:$REST_PORT"
}

"${ENGINE}_env"
"${ENGINE}_$ACTION"
