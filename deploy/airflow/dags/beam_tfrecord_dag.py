"""Airflow DAGs for scheduled beam-tfrecord conversions (Apache Beam provider).

Two DAGs from one definition:
  beam_tfrecord_direct    BeamRunPythonPipelineOperator on the DirectRunner (one machine)
  beam_tfrecord_dataflow  the same on Dataflow, with DataflowConfiguration(job_name,
                          check_if_running, wait_until_finished)
each followed by a task that checks the manifest.json of the version the output's LATEST
names and reads every shard of that version back (`beam-tfrecord verify`).

The pipeline runs in the project's interpreter, not Airflow's: BEAM_TFRECORD_PYTHON (default
<repo>/.venv/bin/python next to this file's repository) with beam-tfrecord installed, and the
entry point <repo>/pipelines/<format>_to_tfrecord.py (BEAM_TFRECORD_REPO overrides <repo>).
Everything a run converts comes from DAG params (trigger with a conf to override them).
Each run is one versioned conversion, `convert --append --output OUTPUT --keep KEEP`: OUTPUT
gets versions/<V>/ (each an ordinary output) and LATEST (a one-line file naming the published
version, written last, after the new version checked out). Only added, changed or removed
images are converted again, unchanged shards are shared with the version before; when no
source changed nothing is published and the run still verifies LATEST's version. `keep`
(default 5) versions are kept; `compact` (default false) makes a full version with a fresh
shard plan. Readers (reader.load, verify, inspect, show) given OUTPUT read LATEST's version.
"""
from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.beam.operators.beam import \
    BeamRunPythonPipelineOperator
from airflow.sdk import DAG, Param, task

try:  # Dataflow configuration objects (apache-airflow-providers-google)
  from airflow.providers.google.cloud.operators.dataflow import (
      CheckJobRunning, DataflowConfiguration)
except ImportError:  # pragma: no cover - the Dataflow DAG needs the google provider
  CheckJobRunning = DataflowConfiguration = None

REPO = os.environ.get("BEAM_TFRECORD_REPO", str(Path(__file__).resolve().parents[3]))
PYTHON = os.environ.get("BEAM_TFRECORD_PYTHON", os.path.join(REPO, ".venv", "bin", "python"))
SCHEDULE = os.environ.get("BEAM_TFRECORD_SCHEDULE", "0 3 * * *")
PROJECT = os.environ.get("GCP_PROJECT")  # None: the project of the google_cloud_default connection
SERVICE_ACCOUNT = os.environ.get("BEAM_TFRECORD_SERVICE_ACCOUNT")  # None: Compute Engine default

COMMON_PARAMS = {
    "format": Param("coco", enum=["coco", "voc", "csv", "yolo", "folders", "labelme", "cvat",
                                  "labelbox", "openimages", "yolo-keras"],
                    description="annotation format (pipelines/FORMAT_to_tfrecord.py, '-' as '_')"),
    "input": Param(["train=/data/coco/annotations/instances_train2017.json"], type="array",
                   description="annotation sources, [SPLIT=]PATH each (--input)"),
    "images": Param([], type="array", description="image roots, [SPLIT=]DIR each (--images)"),
    "output": Param("/data/tfrecords/coco", type="string", description="output directory"),
    "num_shards": Param(None, type=["null", "integer"], minimum=1,
                        description="shards per split (--num-shards)"),
    "shard_size_mb": Param(None, type=["null", "number"], exclusiveMinimum=0,
                           description="target shard size (--shard-size-mb)"),
    "keep": Param(5, type="integer", minimum=0,
                  description="versions to keep in output, always LATEST's; 0: every "
                  "version (--keep)"),
    "compact": Param(False, type="boolean",
                     description="a full version with a fresh shard plan, delta shards merged "
                     "(--compact)"),
    "extra_options": Param({}, type="object",
                           description="more convert or Beam options, {name: value}"),
}


def _convert_options(runner_options: str) -> str:
  """pipeline_options as one Jinja expression rendered to a native dict (the DAG renders
  templates as native objects). The hook turns {name: value} into --name=value (a list into
  one option per item, True into a bare flag, None into nothing), so the CLI's own options
  keep their hyphens here, and Beam's their underscores."""
  return ("{{ dict({'input': params.input, 'images': params.images or None, "
          "'output': params.output, 'num-shards': params.num_shards, "
          "'shard-size-mb': params.shard_size_mb, 'append': True, 'keep': params.keep, "
          "'compact': params.compact or None, "
          + runner_options + "}, **params.extra_options) }}")


@task
def verify_output(output: str, python: str = PYTHON) -> dict:
  """The output has a published version (LATEST, resolved once) that is finished and
  successful: manifest.json with status ok and examples, and every shard parses with
  TensorFlow and matches the manifest's counts."""
  check = (
      "import json, sys\n"
      "from beam_tfrecord.finalize import output\nfrom beam_tfrecord.readback import verify\n"
      "from beam_tfrecord.storage import versions\n"
      "version = versions.resolve(sys.argv[1])\n"
      "assert version != sys.argv[1], 'no LATEST in ' + sys.argv[1]\n"
      "m = output.read_manifest(version)\n"
      "assert m.get('status', 'ok') == 'ok', m.get('status')\n"
      "assert m['totals']['examples'] > 0, m['totals']\n"
      "print(json.dumps({'version': version, 'totals': m['totals'], 'created': m['created'],"
      " 'source_fingerprint': m.get('source_fingerprint')}))\n"
      "sys.exit(verify.run(version))\n")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
  done = subprocess.run([python, "-c", check, output], capture_output=True, text=True, env=env)
  print(done.stdout)
  if done.returncode != 0:
    raise RuntimeError(f"output {output} failed verification:\n{done.stdout}\n{done.stderr}")
  return json.loads(done.stdout.splitlines()[0])


def _dag(dag_id: str, description: str, params: dict, **kw) -> DAG:
  return DAG(
      dag_id=dag_id, description=description, schedule=SCHEDULE,
      start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1,  # no overlapping runs
      render_template_as_native_obj=True, params=params,
      default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
      tags=["beam-tfrecord"], doc_md=__doc__, **kw)


with _dag("beam_tfrecord_direct", "beam-tfrecord on the DirectRunner",
          {**COMMON_PARAMS,
           # Unset (null): nothing passed, the tool's default local runner (Beam's FnApiRunner
           # in process, chosen by benchmarks/). multi_threading lost records under load.
           "direct_num_workers": Param(None, type=["null", "integer"], minimum=1),
           "direct_running_mode": Param(None, type=["null", "string"],
                                        enum=[None, "in_memory", "multi_threading",
                                              "multi_processing"])}) as direct_dag:
  convert = BeamRunPythonPipelineOperator(
      task_id="convert",
      runner="DirectRunner",
      py_file=REPO + "/pipelines/{{ params.format | replace('-', '_') }}_to_tfrecord.py",
      py_interpreter=PYTHON,
      pipeline_options=_convert_options(
          "'direct_num_workers': params.direct_num_workers, "
          "'direct_running_mode': params.direct_running_mode"),
  )
  convert >> verify_output("{{ params.output }}")


if DataflowConfiguration is not None:
  DATAFLOW_PARAMS = {
      **COMMON_PARAMS,
      "input": Param(["train=gs://BUCKET/coco/annotations/instances_train2017.json",
                      "val=gs://BUCKET/coco/annotations/instances_val2017.json"], type="array"),
      "images": Param(["train=gs://BUCKET/coco/train2017", "val=gs://BUCKET/coco/val2017"],
                      type="array"),
      "output": Param("gs://BUCKET/tfrecords/coco2017", type="string"),
      "shard_size_mb": Param(200, type=["null", "number"], exclusiveMinimum=0),
      "region": Param(os.environ.get("GCP_REGION", "us-central1"), type="string"),
      "temp_location": Param("gs://BUCKET/dataflow/tmp", type="string"),
      "staging_location": Param("gs://BUCKET/dataflow/staging", type="string"),
      "machine_type": Param("n2-standard-4", type="string"),
      "max_num_workers": Param(10, type="integer", minimum=1),
      "sdk_container_image": Param(
          "us-central1-docker.pkg.dev/my-project/beam-tfrecord/beam-tfrecord-worker:0.1.0",
          type=["null", "string"],
          description="worker image from deploy/dataflow/Dockerfile.worker; null: install "
          "from setup.py at worker start"),
  }
  with _dag("beam_tfrecord_dataflow", "beam-tfrecord on Dataflow", DATAFLOW_PARAMS) as dataflow_dag:
    convert = BeamRunPythonPipelineOperator(
        task_id="convert",
        runner="DataflowRunner",
        py_file=REPO + "/pipelines/{{ params.format | replace('-', '_') }}_to_tfrecord.py",
        py_interpreter=PYTHON,
        pipeline_options=_convert_options(
            "'region': params.region, 'temp_location': params.temp_location, "
            "'staging_location': params.staging_location, "
            "'machine_type': params.machine_type, 'max_num_workers': params.max_num_workers, "
            "'sdk_container_image': params.sdk_container_image, "
            # No --no_wait_until_finish: with --append the CLI publishes the new version
            # (writes LATEST) after the job has finished, so it waits for the job. It prints
            # the job id as soon as the job is created; the operator reads it from the output
            # as it comes, so killing the task still cancels the job.
            f"'setup_file': '{REPO}/setup.py'"),
        dataflow_config=DataflowConfiguration(
            job_name="beam-tfrecord-{{ params.format }}",
            append_job_name=True,  # a unique suffix per run; the name above stays the prefix
            project_id=PROJECT,  # not templated by the provider: from the environment
            location="{{ params.region }}",
            service_account=SERVICE_ACCOUNT,
            wait_until_finished=True,
            # Never start a second job while one of this name runs. (Provider 6.3.1 applies
            # this only for Java pipelines, so `no_duplicate_job` below enforces it too.)
            check_if_running=CheckJobRunning.FinishIfRunning,
        ),
    )

    @task.short_circuit
    def no_duplicate_job(job_name: str, project, region: str) -> bool:
      """False (skip the conversion) while a Dataflow job of this name is still running."""
      from airflow.providers.google.cloud.hooks.dataflow import DataflowHook
      running = DataflowHook().is_job_dataflow_running(name=job_name, project_id=project,
                                                      location=region)
      if running:
        print(f"a Dataflow job named {job_name}* is still running: not starting another")
      return not running

    (no_duplicate_job("beam-tfrecord-{{ params.format }}", PROJECT, "{{ params.region }}")
     >> convert >> verify_output("{{ params.output }}"))
