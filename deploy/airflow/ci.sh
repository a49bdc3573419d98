#!/usr/bin/env bash
# CI for the Airflow DAGs: install Airflow's own venv (deploy/airflow/.venv, pinned by
# requirements.txt), check that the DAGs import without errors, then run the DirectRunner DAG
# end to end with `airflow dags test` on a small generated sample and check its output.
# The pipeline runs in the project's interpreter (BEAM_TFRECORD_PYTHON, default .venv/bin/python).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
export BEAM_TFRECORD_REPO="$REPO"
export BEAM_TFRECORD_PYTHON="${BEAM_TFRECORD_PYTHON:-$REPO/.venv/bin/python}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
start=$(date +%s)

bash "$HERE/setup.sh"
AIRFLOW_PY="${AIRFLOW_VENV:-$HERE/.venv}/bin/python"
AIRFLOW="${AIRFLOW_VENV:-$HERE/.venv}/bin/airflow"
# The project's interpreter must import beam-tfrecord from anywhere (the DAG runs
# pipelines/<format>_to_tfrecord.py with it).
if ! (cd / && "$BEAM_TFRECORD_PYTHON" -c "import beam_tfrecord") 2>/dev/null; then
  bash "$REPO/scripts/setup-venv.sh"
fi

WORK="$(mktemp -d)"
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"' EXIT
export AIRFLOW_HOME="$WORK/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$HERE/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__LOGGING__LOGGING_LEVEL=WARNING
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$WORK/airflow/airflow.db"
mkdir -p "$AIRFLOW_HOME"

echo "== airflow: db migrate"
"$AIRFLOW" db migrate >"$WORK/migrate.log" 2>&1 || { cat "$WORK/migrate.log"; exit 1; }

echo "== airflow: DAG import check"
"$AIRFLOW_PY" - <<PY
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="$HERE/dags")
assert not bag.import_errors, bag.import_errors
expected = {"beam_tfrecord_direct", "beam_tfrecord_dataflow"}
assert expected <= set(bag.dag_ids), bag.dag_ids
flow = bag.dags["beam_tfrecord_dataflow"]
convert = flow.get_task("convert")
assert convert.dataflow_config.wait_until_finished is True
assert convert.dataflow_config.check_if_running.name == "FinishIfRunning"
assert [t.task_id for t in flow.topological_sort()] == ["no_duplicate_job", "convert", "verify_output"]
for dag_id in sorted(expected):
  dag = bag.dags[dag_id]
  assert dag.max_active_runs == 1
  assert dag.params["keep"] == 5 and dag.params["compact"] is False
  assert "if_changed" not in dag.params and "incremental" not in dag.params
  print(f"  {dag_id}: {[t.task_id for t in dag.topological_sort()]}")
# The direct DAG passes no direct_running_mode (the tool's default runner) unless asked.
direct = bag.dags["beam_tfrecord_direct"]
assert direct.params["direct_running_mode"] is None, direct.params["direct_running_mode"]
assert direct.params["direct_num_workers"] is None, direct.params["direct_num_workers"]
from jinja2.nativetypes import NativeEnvironment
from airflow.providers.apache.beam.hooks.beam import beam_options_to_args
params = {k: direct.params[k] for k in direct.params}
args = beam_options_to_args(NativeEnvironment().from_string(
    direct.get_task("convert").pipeline_options).render(params=params))
assert "--append" in args and "--keep=5" in args, args
assert not any(a.startswith("--direct_") or a.startswith("--compact") for a in args), args
print("  beam_tfrecord_direct, default params: " + " ".join(args))
PY

echo "== airflow: the Dataflow DAG's command line builds a Dataflow job (--dry_run, offline)"
"$AIRFLOW_PY" - "$WORK/dataflow-args.json" <<PY
import json, sys
from jinja2.nativetypes import NativeEnvironment
from airflow.dag_processing.dagbag import DagBag
from airflow.providers.apache.beam.hooks.beam import beam_options_to_args
dag = DagBag(dag_folder="$HERE/dags").dags["beam_tfrecord_dataflow"]
convert = dag.get_task("convert")
params = {k: dag.params[k] for k in dag.params}
params.update({"output": "$WORK/dataflow-out", "temp_location": "gs://demo-bucket/tmp",
               "staging_location": "gs://demo-bucket/staging"})
env = NativeEnvironment()
options = env.from_string(convert.pipeline_options).render(params=params)
options.update(runner=convert.runner, project="demo-project", job_name="beam-tfrecord-coco-test",
               dry_run="True")  # what the hook and the operator add, offline
py_file = env.from_string(convert.py_file).render(params=params)
json.dump([py_file] + beam_options_to_args(options), open(sys.argv[1], "w"))
PY
timeout 600 "$BEAM_TFRECORD_PYTHON" - "$WORK/dataflow-args.json" <<'PY'
import json, os, runpy, sys
os.environ["NO_GCE_CHECK"] = "true"
from apache_beam.internal.gcp import auth  # no credential look-up offline
auth._Credentials._credentials_init, auth._Credentials._credentials = True, None
py_file, *args = json.load(open(sys.argv[1]))
assert "--append" in args and "--keep=5" in args, args
assert any(a.startswith("--input=") for a in args), args
assert not any(a.startswith(("--if-changed", "--incremental", "--overwrite")) for a in args), args
# --append publishes after the job: the CLI must wait for it
assert not any(a.startswith("--no_wait_until_finish") for a in args), args
print("  " + " ".join([os.path.basename(py_file)] + args))
sys.argv = [py_file] + args
try:
  runpy.run_path(py_file, run_name="__main__")
except SystemExit as e:
  assert e.code in (0, None), f"exit status {e.code}"
PY

echo "== airflow: dags test beam_tfrecord_direct on a generated sample"
"$BEAM_TFRECORD_PYTHON" -c "from beam_tfrecord import sample; sample.make_dataset('$WORK/data', count=8)"
CONF=$(cat <<JSON
{"format": "coco",
 "input": ["train=$WORK/data/instances_train.json", "val=$WORK/data/instances_val.json"],
 "images": ["$WORK/data/images"], "output": "$WORK/out", "num_shards": 2}
JSON
)
dags_test() {  # $1: the log; the DAG's default direct_running_mode (none: the tool's default)
  set +e
  timeout 1200 "$AIRFLOW" dags test beam_tfrecord_direct -c "$CONF" >"$1" 2>&1
  local status=$?
  set -e
  # `dags test` exits non-zero when the run failed; the verify task prints verify's verdict.
  if [ "$status" -ne 0 ] || ! grep -q "verify: 8 examples parsed with TensorFlow: OK" "$1"; then
    tail -n 80 "$1"
    echo "airflow dags test failed (status $status)"; exit 1
  fi
  grep -E "^verify: " "$1" | sed 's/^/  dag task: /'
}
dags_test "$WORK/dags-test.log"
# --append: OUTPUT/LATEST, a one-line file, names the first version; readers resolve it.
"$BEAM_TFRECORD_PYTHON" -m beam_tfrecord.cli verify "$WORK/out"
"$BEAM_TFRECORD_PYTHON" - <<PY
import json, os
latest = "$WORK/out/LATEST"
assert os.path.isfile(latest) and not os.path.islink(latest), "LATEST is not a plain file"
assert open(latest).read() == "versions/00000001\n", open(latest).read()
m = json.load(open("$WORK/out/versions/00000001/manifest.json"))
assert m["status"] == "ok" and m["totals"]["examples"] == 8, m["totals"]
print("  LATEST -> versions/00000001:", m["totals"]["examples"], "examples,", sum(s["num_shards"] for s in m["splits"].values()), "shards")
PY
echo "== airflow: dags test again, sources unchanged: nothing published, LATEST verified"
stamp="$(stat -c %Y.%i "$WORK/out/LATEST")"
dags_test "$WORK/dags-test-2.log"
# (the convert task's output is logged at INFO, below this CI's log level: check the result)
if [ "$(cat "$WORK/out/LATEST")" != "versions/00000001" ] || [ -e "$WORK/out/versions/00000002" ] ||
    [ "$(stat -c %Y.%i "$WORK/out/LATEST")" != "$stamp" ] ||
    ! grep -q '"version": "[^"]*/versions/00000001"' "$WORK/dags-test-2.log"; then
  ls -la "$WORK/out" "$WORK/out/versions"; tail -n 80 "$WORK/dags-test-2.log"
  echo "the second run, sources unchanged, published a version or verified another"; exit 1
fi
echo "  unchanged: LATEST still versions/00000001 (not rewritten), and the task verified it"
echo "airflow ci: OK in $(( $(date +%s) - start )) s"
