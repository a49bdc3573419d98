"""What a run does to its process: one BLAS thread, Beam's temporary folders in one of its
own, SIGTERM unwinding like Ctrl-C, and the objects alive at the start kept out of garbage
collection."""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading


def one_blas_thread() -> None:
  """numpy's OpenBLAS (imported with Beam and TensorFlow) starts a thread per core in each
  process, the launcher's and every writer's, and they spin after start. The tool does no
  linear algebra: one thread, unless the user chose. Read by OpenBLAS when numpy loads, so
  set before that, and inherited by the processes a run starts. `benchmarks/run.py
  --variants tool --tree before=...`, medians of interleaved runs: 20,000 photos 5.91 s and
  7.88 CPU-s against 6.15 s and 8.02 (5 runs); 200 images 2.16 CPU-s against 2.24 (7 runs).
  The threads were 1.7% of `perf record -a`'s samples of a 20,000-photo run."""
  os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@contextlib.contextmanager
def private_tempdir():
  """Beam's temporary folders (beam-pipeline-temp*) go into a folder of this run's, removed
  on every exit path; folders of our runs that were killed outright are removed too."""
  import shutil
  import tempfile
  base = tempfile.gettempdir()
  for name in os.listdir(base):
    parts = name.split("-")
    if name.startswith("beam-tfrecord-tmp-") and len(parts) > 3 and parts[3].isdigit():
      try:
        os.kill(int(parts[3]), 0)
      except ProcessLookupError:
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)
      except OSError:
        pass
  private = tempfile.mkdtemp(prefix=f"beam-tfrecord-tmp-{os.getpid()}-", dir=base)
  saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
  os.environ["TMPDIR"], tempfile.tempdir = private, private
  try:
    yield private
  finally:
    tempfile.tempdir = saved_dir
    if saved_env is None:
      os.environ.pop("TMPDIR", None)
    else:
      os.environ["TMPDIR"] = saved_env
    shutil.rmtree(private, ignore_errors=True)


@contextlib.contextmanager
def terminate_as_exit():
  """SIGTERM (a scheduler's kill) unwinds like Ctrl-C, so cleanup code runs."""
  import signal
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.getsignal(signal.SIGTERM)
  signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def startup_frozen():
  """The objects alive when the run starts (Beam's modules, the graph: ~190,000) are never
  garbage, yet each full collection walked them again, and the in-process runner allocates
  millions of records: freezing them (gc.freeze) saved ~1.5 s of CPU in 20,000 images. They
  are unfrozen after the run, so a process that runs several conversions keeps no garbage."""
  gc.freeze()
  try:
    yield
  finally:
    gc.unfreeze()


def wait_for_job(result, options):
  """Wait for the job; its final state, or None when there is no run to wait for.

  Dataflow: prints the job id in the form Airflow's Beam operator parses ("Created job with
  id: [ID]") and the console URL; a failed or cancelled job (Beam raises) is its final state;
  a template (--template_location, also how Flex Templates launch) or --dry_run only built
  the job, and --no_wait_until_finish submits without waiting.
  """
  from apache_beam.options.pipeline_options import (GoogleCloudOptions,
                                                    StandardOptions,
                                                    TestOptions)
  if getattr(result, "has_job", False):
    gcp = options.view_as(GoogleCloudOptions)
    print(f"Created job with id: [{result.job_id()}]\nDataflow console: "
          f"https://console.cloud.google.com/dataflow/jobs/{gcp.region}/{result.job_id()}"
          f"?project={gcp.project}", file=sys.stderr, flush=True)
  elif type(result).__name__ == "DataflowPipelineResult" or options.view_as(TestOptions).dry_run:
    print("beam-tfrecord: job built, not run (template or --dry_run)", file=sys.stderr)
    return None
  if options.view_as(StandardOptions).no_wait_until_finish and getattr(result, "has_job", False):
    print("beam-tfrecord: job submitted, not waiting for it (--no_wait_until_finish)",
          file=sys.stderr)
    return None
  try:
    return result.wait_until_finish()
  except (KeyboardInterrupt, SystemExit):
    raise
  except Exception as e:  # DataflowRuntimeException: the job ended FAILED or CANCELLED
    state = getattr(result, "state", None)
    print(f"beam-tfrecord: {type(e).__name__}: {e}", file=sys.stderr)
    return state if state is not None else "FAILED"


# Modules Beam imports with itself when they are installed, each in a try, which a conversion
# never uses: its MongoDB connector's (pymongo, bson), its pandas type compatibility (pandas,
# which imports pyarrow) and its Pub/Sub connector's client. Kept out of Beam's first import:
# `import apache_beam` took 1.30 s of wall and 1.41 CPU-s with the first three, 0.94 s and
# 1.04 CPU-s without, ~0.1 s less again without Pub/Sub (this machine, 2026-12-07). A module
# that asks for one later (readback/stats: pandas) imports it as usual.
NOT_FOR_BEAM = ("pymongo", "bson", "pandas", "google.cloud.pubsub")


def import_beam():
  """apache_beam, imported without NOT_FOR_BEAM when this is its first import (Beam imports
  each in a try and goes on without it)."""
  if "apache_beam" not in sys.modules:
    kept_out = [name for name in NOT_FOR_BEAM if name not in sys.modules]
    for name in kept_out:
      sys.modules[name] = None  # an ImportError for whoever imports it meanwhile
    try:
      import apache_beam  # noqa: F401
    finally:
      for name in kept_out:
        if name in sys.modules and sys.modules[name] is None:
          del sys.modules[name]
  return sys.modules["apache_beam"]


def pipeline_options(beam_args):
  """The command line's Beam options, with the tool's local default runner: Beam's
  FnApiRunner in process (benchmarks/README.md). It is what the DirectRunner falls back to
  offline, minus ~2 s spent trying to fetch Prism; on 2 cores multi_processing was slower
  (worker start-up, data passed between processes) and used 3x the memory. Warns (one line)
  when multi_threading is asked for."""
  beam = import_beam()
  from apache_beam.options.pipeline_options import PipelineOptions
  options = PipelineOptions(list(beam_args))
  standard = options.view_as(beam.options.pipeline_options.StandardOptions)
  direct = options.view_as(beam.options.pipeline_options.DirectOptions)
  if standard.runner is None:
    standard.runner = "FnApiRunner"
  if direct.direct_running_mode == "multi_threading":
    print("beam-tfrecord: warning: Beam's multi_threading mode lost records under load in our "
          "measurements; the run fails rather than finish incomplete if that happens",
          file=sys.stderr)
  return options


def build_pipeline(options, config, argv, run_id: str):
  """The conversion's Pipeline of these options, built (pipeline.build). UsageError (one
  line) for a runner Beam cannot make, or a problem found while building."""
  import apache_beam as beam

  from beam_tfrecord import pipeline
  from beam_tfrecord.errors import UsageError
  try:
    p = beam.Pipeline(options=options)
  except (ValueError, ImportError) as e:  # a runner Beam cannot make (a dotted name)
    runner = options.view_as(beam.options.pipeline_options.StandardOptions).runner
    raise UsageError(f"--runner {runner}: {e}") from None
  try:
    pipeline.build(p, config, argv, run_id)
  except ValueError as e:
    raise UsageError(str(e)) from None
  return p


def run_to_end(p, options, staging: str, unchanged: str):
  """Run the built pipeline under the progress line (its counters in `staging`) and wait for
  the job. (exit code, result): EXIT_FAILED after one line ending with `unchanged` when the
  run raised or the job ended in a state other than DONE; EXIT_OK when there is no job to
  wait for (--no_wait_until_finish); None when it ended DONE."""
  from beam_tfrecord.errors import EXIT_FAILED, EXIT_OK
  from beam_tfrecord.storage.progress import Progress
  from beam_tfrecord.storage import processes
  with Progress(staging), startup_frozen():
    try:
      result = p.run()  # local runners block here; remote ones return at once
    except Exception as e:  # a DoFn raised past our error handling: a runner failure
      first = str(e).strip().splitlines()[0] if str(e).strip() else ""
      print(f"beam-tfrecord: the pipeline failed ({type(e).__name__}: {first[:300]}); "
            f"{unchanged}", file=sys.stderr)
      return EXIT_FAILED, None
    finally:  # the run's worker processes (storage/processes): none outlives its run
      processes.stop_idle()
    state = wait_for_job(result, options)
  if state is None:  # --no_wait_until_finish: the job goes on without us
    return EXIT_OK, result
  if str(state) not in ("DONE", "PipelineState.DONE"):
    print(f"beam-tfrecord: pipeline ended in state {state}; {unchanged}", file=sys.stderr)
    return EXIT_FAILED, result
  return None, result
