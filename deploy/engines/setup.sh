#!/usr/bin/env bash
# Installs or builds what beam-tfrecord needs to run on Beam's portable engines, into a cache
# folder (issue 39).
#
#   bash deploy/engines/setup.sh [prism|spark|flink|worker]  (default: prism)
#
# worker: only the PROCESS workers' image and wheels (below; prism and spark make them too),
#         and the dependencies layer (prints the image, then the layer)
#
# prism: two Go modules, built with `go install` from the Go module proxy (GOPROXY as
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
# If the proxy refuses vV, the refusal is printed as go reported it, and the nearest served
# versions are tried (the proxy's own list: the newest below V first, then the oldest above).
# A binary of another version is reported as a mismatch (issue 39, item 5 wants them equal).
#
# spark: the Python boot as for prism (the workers are the same), and
#   pyspark==$SPARK_VERSION from PyPI (pip --target; it ships Spark's jars and
#          bin/spark-class, sbin/spark-daemon.sh: what deploy/engines/cluster.sh runs)
#          -> $ENGINES_CACHE/spark/pyspark-$SPARK_VERSION/pyspark      (SPARK_HOME)
#   the job server jar, from Maven Central with mvn:
#     1. org.apache.beam:beam-runners-spark-3-job-server:V (mvn dependency:copy), Beam's own
#        jar, at the SDK's version;
#     2. if that is refused: assembled from org.apache.beam:beam-runners-spark-3 (whose
#        SparkJobServerDriver is the job server) with its dependencies and Spark
#        $SPARK_VERSION, shaded into one jar as Beam's build does
#        (deploy/engines/spark-job-server.pom.xml), at the newest version <= V whose Beam
#        modules the registry serves (a mismatch is reported: issue 39, item 5).
#        -> $ENGINES_CACHE/spark/job-server/vW/beam-runners-spark-3-job-server-W[-assembled].jar
#   $ENGINES_CACHE/spark/job-server-for-V names the jar convert-on.sh uses for SDK version V.
#   SPARK_VERSION: 3.5.0 by default, the Spark that Beam's spark-3 runner is built against
#   (its pom: spark-core_2.12 3.5.0); the cluster and the job server's Spark are the same.
#
# flink: the Python boot as for prism, and
#   apache-flink-libraries==$FLINK_VERSION from PyPI (an sdist, downloaded and unpacked, not
#          built: Flink's lib/ jars and bash-java-utils.jar; no scripts, cluster.sh starts the
#          JVMs)                                -> $ENGINES_CACHE/flink/flink-$FLINK_VERSION
#   the job server jar as for spark: org.apache.beam:beam-runners-flink-M-job-server:V, else
#          assembled from org.apache.beam:beam-runners-flink-M (flink-job-server.pom.xml)
#          -> $ENGINES_CACHE/flink/job-server/vW/beam-runners-flink-M-job-server-W[-assembled].jar
#   FLINK_VERSION: 1.19.0 by default (M = 1.19), the Flink beam-runners-flink-1.19 is built
#   against.
#
# Idempotent: what is already there is not fetched or built again (each goes to a temporary
# folder first, so a failed step leaves nothing half-made).
#
# Environment:
#   ENGINES_CACHE   cache folder (default ~/.cache/beam-tfrecord/engines)
#   BEAM_PYTHON     the Python whose apache-beam version is matched (default: the
#                   repository's .venv/bin/python, else python3)
#   BEAM_VERSION    the version to build (e.g. 2.78.0) instead of asking Python
#   BEAM_TFRECORD_SETUP_FILE  worker: the setup.py whose dependencies the workers get
#                   (default the repository's)
#   SPARK_VERSION   spark: the pyspark / Spark version (default 3.5.0)
#   FLINK_VERSION   flink: the Flink version (default 1.19.0)
#   MVN             spark: the Maven command (default mvn)
# Prints the paths of what it made on stdout (prism: prism, boot, the worker image; spark:
# boot, the worker image, SPARK_HOME, the job server jar; worker: the worker image);
# everything else goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# the project the workers get: the folder of the setup.py a job stages (convert-on.sh's)
PROJECT=$(cd "$(dirname "${BEAM_TFRECORD_SETUP_FILE:-$REPO/setup.py}")" && pwd)
ENGINES_CACHE=${ENGINES_CACHE:-$HOME/.cache/beam-tfrecord/engines}
ENGINE=${1:-prism}
MODULE=github.com/apache/beam/sdks/v2

log() { echo "setup.sh: $*" >&2; }

case "$ENGINE" in
  prism|spark|flink|worker) ;;
  *) log "unknown engine '$ENGINE' (known: prism, spark, flink, worker)"; exit 2 ;;
esac

PY=${BEAM_PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY=python3; fi
fi
if [ -z "${BEAM_VERSION:-}" ]; then
  BEAM_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("apache-beam"))') ||
    { log "$PY has no apache-beam installed"; exit 1; }
fi
command -v go >/dev/null || { log "go is not on PATH (needed to build Prism and the Python boot)"; exit 1; }

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

# ------------------------------------------------------------------- the workers' image
# What a Dataflow worker starts from, made once: Beam's Python SDK container has the SDK
# (apache-beam[gcp]) installed, pinned by the container's base_image_requirements.txt, and its
# boot makes a fresh venv over it for each worker, into which it pip-installs what the job
# staged. Here:
#   $ENGINES_CACHE/worker-image/pyX.Y-beamV/        a venv: apache-beam[gcp]==V and its
#       dependencies, pip, setuptools, wheel, each at the version Beam V's pyXY container pins
#       (python/container/pyXY/base_image_requirements.txt of the Go module boot is built
#       from, as constraints; only Beam's own dependency closure, not the container's 208
#       packages). worker.sh puts it under each worker's fresh venv (a .pth: what the
#       container's site-packages are under boot's --system-site-packages venv).
#   $ENGINES_CACHE/worker-image/pyX.Y-beamV-wheels/ wheels of what the project's setup.py needs
#       on top of the image, as a worker's pip would resolve it there (pip install --dry-run
#       --report in a worker-like venv), so that boot's pip installs offline (PIP_NO_INDEX,
#       PIP_FIND_LINKS) instead of downloading tensorflow at every worker start. Made again
#       when setup.py changes (.for-SHA stamps); convert-on.sh runs `setup.sh worker` for that.
worker_image() {
  local pyv pyxy image wheels sha constraints dir probe site
  pyv=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  pyxy=${pyv/./}
  image="$ENGINES_CACHE/worker-image/py$pyv-beam$BEAM_VERSION"
  wheels="$image-wheels"
  sha=$(sha256sum "$PROJECT/setup.py" | cut -c1-16)
  if [ -f "$image/.complete" ] && [ -f "$wheels/.for-$sha" ]; then
    log "worker image py$pyv Beam $BEAM_VERSION: already there ($image; wheels for setup.py $sha)"
    echo "$image"
    return 0
  fi
  mkdir -p "$ENGINES_CACHE/worker-image"
  exec 9>"$ENGINES_CACHE/worker-image/.lock"
  flock 9   # convert-on.sh runs may call this at once
  if [ ! -f "$image/.complete" ]; then
    dir=$(go mod download -json "$MODULE@v$BEAM_VERSION" 2>/dev/null |
          "$PY" -c 'import json, sys; print(json.load(sys.stdin).get("Dir", ""))') || dir=""
    constraints="$dir/python/container/py$pyxy/base_image_requirements.txt"
    [ -f "$constraints" ] || { log "worker image: no $constraints (Beam $BEAM_VERSION's py$pyxy container pins)"; return 1; }
    log "worker image: venv + pip install apache-beam[gcp]==$BEAM_VERSION pip setuptools wheel -c $constraints ..."
    local t0=$SECONDS
    rm -rf "$image"
    "$PY" -m venv "$image" >&2
    # The container's pins as constraints, each X as X.* (X or a post-release of it), and a pin
    # the index does not serve is dropped, named in the log: on 2026-12-07 this machine's index
    # served pip 26.2.2.post1 but not the 26.2.2 that Beam 2.78's container pins, nor certifi
    # 2026.10.23 (pip: "ResolutionImpossible ... The user requested (constraint) pip==26.2.2").
    sed -E 's/^([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)$/\1==\2.*/' "$constraints" > "$image.constraints"
    local tries=0 refused
    until "$image/bin/python" -m pip install --progress-bar off --disable-pip-version-check \
            -c "$image.constraints" "apache-beam[gcp]==$BEAM_VERSION" pip setuptools wheel \
            >"$image.pip.log" 2>&1; do
      refused=$(grep -o 'The user requested (constraint) [A-Za-z0-9_.-]*==' "$image.pip.log" | head -1 |
                sed 's/.* //; s/==$//') || true
      tries=$((tries + 1))
      if [ -z "$refused" ] || [ $tries -gt 30 ]; then
        tail -30 "$image.pip.log" >&2
        rm -rf "$image" "$image.constraints" "$image.pip.log"; log "worker image: pip install FAILED"; return 1
      fi
      log "worker image: WARNING: the index serves no $(grep -i "^$refused==" "$image.constraints" | sed 's/\.\*$//') (the container's pin): left unpinned"
      grep -iv "^$refused==" "$image.constraints" > "$image.constraints.new"
      mv "$image.constraints.new" "$image.constraints"
    done
    mv "$image.constraints" "$image/.constraints.txt"
    rm -f "$image.pip.log"
    touch "$image/.complete"
    log "worker image: made in $((SECONDS - t0)) s -> $image ($(du -sh "$image" | cut -f1))"
  fi
  if [ ! -f "$wheels/.for-$sha" ]; then
    local t0=$SECONDS
    log "worker wheels: what setup.py ($sha) needs over the image, as a worker's pip resolves it ..."
    probe=$(mktemp -d "$ENGINES_CACHE/worker-image/.probe.XXXXXX")
    "$image/bin/python" -m venv --without-pip "$probe/venv"
    site=$("$probe/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    "$image/bin/python" -c 'import sys, sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_path("purelib"))' \
      > "$site/00-beam-worker-image.pth"
    if ! (cd "$probe" && "$probe/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            --no-build-isolation --dry-run --report "$probe/report.json" "$PROJECT" >&2); then
      rm -rf "$probe"; log "worker wheels: pip install --dry-run of $PROJECT FAILED"; return 1
    fi
    "$PY" -c '
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
  meta = item["metadata"]
  if meta["name"].lower().replace("_", "-") != "beam-tfrecord":
    print("%s==%s" % (meta["name"], meta["version"]))' "$probe/report.json" > "$probe/pins.txt"
    log "worker wheels: $(wc -l < "$probe/pins.txt") packages over the image: $(tr '\n' ' ' < "$probe/pins.txt" | cut -c1-300)"
    mkdir -p "$wheels"
    if ! "$image/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
         -w "$wheels" -r "$probe/pins.txt" >&2; then
      rm -rf "$probe"; log "worker wheels: pip wheel FAILED"; return 1
    fi
    cp "$probe/pins.txt" "$wheels/.for-$sha"
    rm -rf "$probe"
    log "worker wheels: in $((SECONDS - t0)) s -> $wheels ($(du -sh "$wheels" | cut -f1))"
  fi
  echo "$image"
}

# deps_layer IMAGE: the packages setup.py needs over the image (its wheels' pins), installed
# once into $IMAGE-deps/SHA/ (pip --target), for worker.sh to put under each worker's venv
# beside the image (convert-on.sh --deps image, the default): a worker's pip then finds them
# installed and installs only the staged project, as on Dataflow with a worker image that has
# the project's dependencies (deploy/dataflow/Dockerfile.worker). Made from the staged
# setup.py's own resolution: a dependency it does not declare is not there.
deps_layer() {
  local image=$1 sha layer tmp t0=$SECONDS
  sha=$(sha256sum "$PROJECT/setup.py" | cut -c1-16)
  layer="$image-deps/$sha"
  mkdir -p "$image-deps"
  exec 8>"$image-deps/.lock"
  flock 8   # runs at once: one makes the layer, the others wait and use it
  if [ ! -f "$layer/.complete" ]; then
    tmp=$(mktemp -d "$image-deps/.make.XXXXXX")
    log "worker dependencies: pip install --target of the $(wc -l < "$image-wheels/.for-$sha") packages setup.py ($sha) needs over the image ..."
    if ! "$image/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
         --no-index --no-compile --find-links "$image-wheels" --target "$tmp" \
         -r "$image-wheels/.for-$sha" >&2; then
      rm -rf "$tmp"; log "worker dependencies: pip install FAILED"; return 1
    fi
    touch "$tmp/.complete"
    rm -rf "$layer"; mv "$tmp" "$layer"
    log "worker dependencies: in $((SECONDS - t0)) s -> $layer ($(du -sh "$layer" | cut -f1))"
  fi
  echo "$layer"
}

if [ "$ENGINE" = worker ]; then
  image=$(worker_image | tail -1)
  echo "$image"
  deps_layer "$image"
  exit 0
fi

if [ "$ENGINE" = prism ]; then
  build_matching prism "$MODULE/go/cmd/prism" prism
  build_matching python-boot "$MODULE/python/container" boot
  worker_image
  exit 0
fi

# ------------------------------------------------------------- the engines' job servers
# job_server NAME CACHE JOB_SERVER_ARTIFACT RUNNER_ARTIFACT POM ENGINE_STAMP MVN_DEFINES...:
# the job server jar of engine NAME for the SDK's version: Beam's own (mvn dependency:copy),
# else assembled from the runner with POM (Beam's modules at the newest listed version that
# resolves); CACHE/job-server-for-V names it. mvn's output goes to a log in the build folder,
# shown on failure.
job_server() {
local name=$1 cache=$2 JOB_SERVER_ARTIFACT=$3 RUNNER_ARTIFACT=$4 pom=$5 stamp=$6
shift 6
local defines=("$@") pointer POM_SUM jar found="" dir repo listed tried v t0
local base=${JOB_SERVER_ARTIFACT##*:}
pointer="$cache/job-server-for-$BEAM_VERSION"
# an assembled jar is made again when its pom (or the engine version) changed since
POM_SUM=$(sha256sum "$pom" | cut -c1-16)
if [ -f "$pointer" ] && [ -f "$(cat "$pointer")" ]; then
  jar=$(cat "$pointer")
  case "$jar" in
    *-assembled.jar) [ "$(cat "$jar.pom-sum" 2>/dev/null)" = "$POM_SUM-$stamp" ] ||
                       { log "$name job server: $jar was assembled from another pom or engine version: again"; jar=""; } ;;
  esac
  if [ -n "$jar" ]; then
    log "$name job server for Beam $BEAM_VERSION: already there ($jar)"
    echo "$jar"
    return 0
  fi
fi

mkdir -p "$cache/job-server"
work=$(mktemp -d "$cache/job-server/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# mvn_quiet LOG ARGS...: mvn -B ARGS, its output into $work/LOG; status mvn's
mvn_quiet() { local log=$1; shift; "$MVN" -B -Dstyle.color=never "$@" >"$work/$log" 2>&1; }
mvn_said() { grep -E '^\[ERROR\] (Failed|Could not|Couldn)' "$work/$1" | head -2 | cut -c1-400 | sed 's/^/    /' >&2; }

# 1. Beam's own job server jar at the SDK's version
log "$name job server: mvn dependency:copy $JOB_SERVER_ARTIFACT:$BEAM_VERSION ..."
if mvn_quiet copy.log -U dependency:copy "-Dartifact=$JOB_SERVER_ARTIFACT:$BEAM_VERSION" \
     "-DoutputDirectory=$work/copy" -Dmdep.useBaseVersion=true; then
  dir="$cache/job-server/v$BEAM_VERSION"
  mkdir -p "$dir"
  mv "$work/copy/$base-$BEAM_VERSION.jar" "$dir/"
  found="$dir/$base-$BEAM_VERSION.jar"
else
  log "$name job server: $JOB_SERVER_ARTIFACT:$BEAM_VERSION was REFUSED; mvn said:"
  mvn_said copy.log
  # 2. assembled from the runner: the versions Maven Central lists for it (its
  #    maven-metadata.xml, read by resolving a version range), newest <= the SDK's first
  cat > "$work/probe.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>probe</groupId><artifactId>probe</artifactId><version>1</version><packaging>pom</packaging>
<dependencies><dependency><groupId>org.apache.beam</groupId><artifactId>${RUNNER_ARTIFACT##*:}</artifactId>
<version>[2.0.0,$BEAM_VERSION]</version><type>pom</type>
<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
</dependency></dependencies></project>
POM
  mvn_quiet probe.log -U -f "$work/probe.xml" dependency:resolve -DexcludeTransitive=true || true
  repo=$("$MVN" -B -q -Dstyle.color=never help:evaluate -Dexpression=settings.localRepository -DforceStdout 2>/dev/null |
        sed 's/\x1b\[[0-9;]*m//g' || true)  # (mvn 3.8 colours even -B -q output)
  repo=${repo:-$HOME/.m2/repository}
  listed=$(cat "$repo/org/apache/beam/${RUNNER_ARTIFACT##*:}/"maven-metadata-*.xml 2>/dev/null |
           grep -o '<version>[0-9][0-9.]*</version>' | sed 's/<[^>]*>//g' | sort -uV |
           awk -v v="$BEAM_VERSION" 'BEGIN { split(v, b, ".") }
             { split($0, a, "."); k = a[1] * 1e6 + a[2] * 1e3 + a[3]; if (k <= b[1] * 1e6 + b[2] * 1e3 + b[3]) print }' |
           sort -rV) || true
  [ -n "$listed" ] || { log "$name job server: Maven Central lists no version of $RUNNER_ARTIFACT <= $BEAM_VERSION"; return 1; }
  log "$name job server: $RUNNER_ARTIFACT versions listed <= $BEAM_VERSION: $(echo $listed | cut -c1-200)"
  tried=0
  for v in $listed; do
    [ $tried -lt 4 ] || break
    tried=$((tried + 1))
    log "$name job server: assembling from $RUNNER_ARTIFACT:$v ($stamp; mvn package of $(basename "$pom")) ..."
    t0=$SECONDS
    if mvn_quiet "shade-$v.log" -U -f "$pom" package \
         "-Dbeam.version=$v" "${defines[@]}" "-DbuildDir=$work/target-$v"; then
      dir="$cache/job-server/v$v"
      mkdir -p "$dir"
      mv "$work/target-$v/$name-job-server.jar" "$dir/$base-$v-assembled.jar"
      found="$dir/$base-$v-assembled.jar"
      echo "$POM_SUM-$stamp" > "$found.pom-sum"
      log "$name job server: assembled in $((SECONDS - t0)) s"
      [ "$v" = "$BEAM_VERSION" ] ||
        log "WARNING: the $name job server is Beam $v, the SDK is $BEAM_VERSION (issue 39, item 5)"
      break
    fi
    log "$name job server: $RUNNER_ARTIFACT:$v could not be assembled; mvn said:"
    mvn_said "shade-$v.log"
  done
fi
[ -n "$found" ] || { log "$name job server: nothing served near Beam $BEAM_VERSION could be had"; return 1; }
echo "$found" > "$pointer"
echo "$found"
}

# a JVM engine's common part ($1: its name as logged): the Python boot, the worker image,
# java and Maven (MVN) on PATH
jvm_engine() {
  build_matching python-boot "$MODULE/python/container" boot
  worker_image
  MVN=${MVN:-mvn}
  command -v java >/dev/null || { log "java is not on PATH ($1 and its job server are JVM programs)"; exit 1; }
  command -v "$MVN" >/dev/null || { log "$MVN is not on PATH (the job server comes from Maven Central)"; exit 1; }
}

if [ "$ENGINE" = spark ]; then
jvm_engine Spark
SPARK_VERSION=${SPARK_VERSION:-3.5.0}
SPARK_CACHE="$ENGINES_CACHE/spark"

# pyspark from PyPI: Spark's jars and scripts (SPARK_HOME is its package folder)
pyspark_dir="$SPARK_CACHE/pyspark-$SPARK_VERSION"
if [ -x "$pyspark_dir/pyspark/bin/spark-class" ] && [ -f "$pyspark_dir/pyspark/sbin/spark-daemon.sh" ]; then
  log "pyspark $SPARK_VERSION: already there ($pyspark_dir/pyspark)"
else
  mkdir -p "$SPARK_CACHE"
  tmp=$(mktemp -d "$SPARK_CACHE/.pyspark.XXXXXX")
  log "pyspark $SPARK_VERSION: pip install --no-deps --target ... pyspark==$SPARK_VERSION (~350 MB) ..."
  t0=$SECONDS
  if ! "$PY" -m pip install --quiet --no-deps --no-compile --target "$tmp" "pyspark==$SPARK_VERSION" >&2; then
    rm -rf "$tmp"; log "pyspark $SPARK_VERSION: pip install FAILED"; exit 1
  fi
  chmod +x "$tmp/pyspark/bin/"*.sh "$tmp/pyspark/sbin/"*.sh 2>/dev/null || true
  rm -rf "$pyspark_dir"; mv "$tmp" "$pyspark_dir"
  log "pyspark $SPARK_VERSION: installed in $((SECONDS - t0)) s -> $pyspark_dir/pyspark"
fi
echo "$pyspark_dir/pyspark"

job_server spark "$SPARK_CACHE" org.apache.beam:beam-runners-spark-3-job-server \
  org.apache.beam:beam-runners-spark-3 "$HERE/spark-job-server.pom.xml" "$SPARK_VERSION" \
  "-Dspark.version=$SPARK_VERSION"
exit $?
fi

# ---------------------------------------------------------------------------------- flink
jvm_engine Flink
FLINK_VERSION=${FLINK_VERSION:-1.19.0}
FLINK_MINOR=${FLINK_VERSION%.*}
FLINK_CACHE="$ENGINES_CACHE/flink"

# Flink's jars from PyPI: apache-flink-libraries (an sdist: downloaded and unpacked, not
# built) carries lib/ (flink-dist, log4j) and bin/bash-java-utils.jar (which computes a
# TaskManager's memory options, as Flink's scripts ask it); cluster.sh starts the JVMs.
flink_dir="$FLINK_CACHE/flink-$FLINK_VERSION"
if [ -f "$flink_dir/lib/flink-dist-$FLINK_VERSION.jar" ] && [ -f "$flink_dir/bash-java-utils.jar" ]; then
  log "flink $FLINK_VERSION: already there ($flink_dir)"
else
  mkdir -p "$FLINK_CACHE"
  tmp=$(mktemp -d "$FLINK_CACHE/.flink.XXXXXX")
  log "flink $FLINK_VERSION: pip download apache-flink-libraries==$FLINK_VERSION (~230 MB) ..."
  t0=$SECONDS
  if ! "$PY" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp/dl" \
       "apache-flink-libraries==$FLINK_VERSION" >&2 ||
     ! tar -xzf "$tmp/dl/apache-flink-libraries-$FLINK_VERSION.tar.gz" -C "$tmp"; then
    rm -rf "$tmp"; log "flink $FLINK_VERSION: pip download FAILED"; exit 1
  fi
  mkdir -p "$tmp/flink"
  mv "$tmp/apache-flink-libraries-$FLINK_VERSION/deps/lib" "$tmp/flink/lib"
  mv "$tmp/apache-flink-libraries-$FLINK_VERSION/deps/bin/bash-java-utils.jar" "$tmp/flink/"
  rm -rf "$flink_dir"; mv "$tmp/flink" "$flink_dir"; rm -rf "$tmp"
  log "flink $FLINK_VERSION: unpacked in $((SECONDS - t0)) s -> $flink_dir"
fi
echo "$flink_dir"

job_server flink "$FLINK_CACHE" "org.apache.beam:beam-runners-flink-$FLINK_MINOR-job-server" \
  "org.apache.beam:beam-runners-flink-$FLINK_MINOR" "$HERE/flink-job-server.pom.xml" \
  "$FLINK_VERSION" "-Dflink.minor=$FLINK_MINOR"

