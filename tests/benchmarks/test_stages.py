"""benchmarks/stages.py's bookkeeping: which stage a sampled stack belongs to, the microseconds
per image, the markdown table. The stacks are py-spy `-f raw` lines captured from real profiles
of `beam-tfrecord convert` (200 images; in-process runner, writer processes, and Beam's
multi_processing workers), trimmed: the common outer frames are shared below and some runner
frames between them left out. Nothing here runs py-spy or a conversion, or times anything."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
REPO = BENCHMARKS.parent
sys.path.insert(0, str(BENCHMARKS))
import machine  # noqa: E402
import stages  # noqa: E402

# --- the processes (py-spy's process frames) and their outer frames ---------------------------
WRAPPER = ('process 29393:"/work/main/.venv/bin/python /work/main/benchmarks/stages.py '
           '--wrapper /work/main/benchmarks/results/stages-1.txt.rusage.json -- '
           '/work/main/.venv/bin/python -m beam_tfrecord.cli convert --format coco"')
MAIN = ('process 29398:"/work/main/.venv/bin/python -m beam_tfrecord.cli convert --format coco '
        '--input train=coco-200.json --images images --output out"')
WRITER = ('process 1832:"/work/main/.venv/bin/python -c import sys; from '
          'beam_tfrecord.write.shard_writer import serve; serve(int(sys.argv[1])) 5"')
WORKER = 'process 2181:"/work/main/.venv/bin/python -m apache_beam.runners.worker.sdk_worker_main"'

CLI = ("_run_module_as_main (<frozen runpy>:198);_run_code (<frozen runpy>:88);"
       "<module> (beam_tfrecord/cli/__main__.py:5);console (beam_tfrecord/cli/__init__.py:79);"
       "main (beam_tfrecord/cli/__init__.py:41);_main (beam_tfrecord/cli/__init__.py:68)")
# the in-process runner running a bundle (the main process's pipeline work)
BUNDLE = (CLI + ";run_convert (beam_tfrecord/cli/convert.py:85);"
          "run_to_end (beam_tfrecord/cli/process.py:151);"
          "Pipeline.run (apache_beam/pipeline.py:563);"
          "FnApiRunner.run_pipeline (apache_beam/runners/portability/fn_api_runner/"
          "fn_runner.py:191);"
          "FnApiRunner.run_stages (apache_beam/runners/portability/fn_api_runner/"
          "fn_runner.py:465);"
          "BundleManager.process_bundle (apache_beam/runners/portability/fn_api_runner/"
          "fn_runner.py:1355);"
          "EmbeddedWorkerHandler.push (apache_beam/runners/portability/fn_api_runner/"
          "worker_handlers.py:387);"
          "SdkWorker.do_instruction (apache_beam/runners/worker/sdk_worker.py:671);"
          "SdkWorker.process_bundle (apache_beam/runners/worker/sdk_worker.py:709);"
          "BundleProcessor.process_bundle (apache_beam/runners/worker/bundle_processor.py:1350);"
          "DataInputOperation.process_encoded (apache_beam/runners/worker/bundle_processor.py:263)")
# a bundle on a thread of a Beam worker process (multi_processing)
WORKER_BUNDLE = (
    "Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner (threading.py:1045);"
    "_Worker.run (apache_beam/utils/thread_pool_executor.py:53);"
    "SdkHarness._execute (apache_beam/runners/worker/sdk_worker.py:310);"
    "SdkWorker.do_instruction (apache_beam/runners/worker/sdk_worker.py:671);"
    "SdkWorker.process_bundle (apache_beam/runners/worker/sdk_worker.py:709);"
    "BundleProcessor.process_bundle (apache_beam/runners/worker/bundle_processor.py:1350);"
    "DataInputOperation.process_encoded (apache_beam/runners/worker/bundle_processor.py:263)")
SERVE = "<module> (<string>:1);serve (beam_tfrecord/write/shard_writer.py:551)"
THREAD = "Thread._bootstrap (threading.py:1002);Thread._bootstrap_inner (threading.py:1045)"
JOIN = ("_JoinFile.process (beam_tfrecord/sources/coco/workers.py:240);"
        "join_image (beam_tfrecord/sources/coco/join.py:65)")
WRITE = ("_WriteShard.process (beam_tfrecord/write/transform.py:132);"
         "write_shard (beam_tfrecord/write/shard_writer.py:175)")

# (process frame, stack, expected stage)
CAPTURED = [
    # source parse: the C scanner's windows, the join, the spill buffer
    (WORKER, WORKER_BUNDLE + ";_JoinFile.process (beam_tfrecord/sources/coco/workers.py:242);"
     "_JoinFile._parse_all (beam_tfrecord/sources/coco/workers.py:282);"
     "_all_entries (beam_tfrecord/sources/coco/workers.py:184);"
     "fast_sections (beam_tfrecord/sources/coco/scan.py:272);"
     "fast_sections.<locals>.batch (beam_tfrecord/sources/coco/scan.py:218)", stages.SOURCE),
    (MAIN, BUNDLE + ";" + JOIN.replace(":65)", ":88)"), stages.SOURCE),
    (MAIN, BUNDLE + ";_JoinFile.process (beam_tfrecord/sources/coco/workers.py:255);"
     "_JoinBuffer.partition (beam_tfrecord/sources/coco/buffer.py:120);"
     "read_records (beam_tfrecord/storage/spill.py:28)", stages.SOURCE),
    # locate: the join resolves and stats the image (paths' helpers are their caller's)
    (MAIN, BUNDLE + ";" + JOIN + ";resolve_sized (beam_tfrecord/storage/paths.py:104);"
     "_plain_path_inside (beam_tfrecord/storage/paths.py:169)", stages.LOCATE),
    (MAIN, BUNDLE + ";locate_batch (beam_tfrecord/prepare/locate.py:40);"
     "ImageAnnotation.replace (beam_tfrecord/records/model.py:85)", stages.LOCATE),
    # select
    (MAIN, BUNDLE + ";_Select.process (beam_tfrecord/prepare/select.py:58);"
     "select_image (beam_tfrecord/prepare/select.py:33)", stages.SELECT),
    # pack: build()'s Pack lambda, packed.pack (and plain's converters under it)
    (MAIN, BUNDLE + ";Map.<locals>.<lambda> (apache_beam/transforms/core.py:2128);"
     "build.<locals>.<lambda> (beam_tfrecord/pipeline.py:186);"
     "pack (beam_tfrecord/records/packed.py:44);"
     "record_converters.<locals>.to_plain (beam_tfrecord/records/plain.py:75)", stages.PACK),
    (MAIN, BUNDLE + ";Map.<locals>.<lambda> (apache_beam/transforms/core.py:2128);"
     "build.<locals>.<lambda> (beam_tfrecord/pipeline.py:186)", stages.PACK),
    # partition and spill: appending to the spill files, reading them back in the sort
    (MAIN, BUNDLE + ";_SpillPartitions.process (beam_tfrecord/plan/transform.py:40);"
     "Spill.add (beam_tfrecord/storage/spill.py:66)", stages.SPILL),
    (MAIN, BUNDLE + ";_SortRuns.process (beam_tfrecord/plan/transform.py:64);"
     "_SortRuns.process.<locals>.<listcomp> (beam_tfrecord/plan/transform.py:64);"
     "read_records (beam_tfrecord/storage/spill.py:28)", stages.SPILL),
    # sort: sorting a run, writing it
    (MAIN, BUNDLE + ";_SortRuns.process (beam_tfrecord/plan/transform.py:67);"
     "sort_partition (beam_tfrecord/plan/shard_plan.py:402)", stages.SORT),
    (WORKER, WORKER_BUNDLE + ";_SortRuns.process (beam_tfrecord/plan/transform.py:70);"
     "write_run (beam_tfrecord/plan/runs.py:42);"
     "write_records (beam_tfrecord/storage/spill.py:21)", stages.SORT),
    # plan: the counts (per image) and the combine
    (WORKER, WORKER_BUNDLE + ";_PlanFn.add_input (beam_tfrecord/plan/transform.py:139);"
     "add_counts (beam_tfrecord/plan/shard_plan.py:246)", stages.PLAN),
    (MAIN, BUNDLE + ";_SortRuns.process (beam_tfrecord/plan/transform.py:74);"
     "add_counts (beam_tfrecord/plan/shard_plan.py:246)", stages.PLAN),
    (MAIN, BUNDLE + ";_PlanFn.extract_output (beam_tfrecord/plan/transform.py:154);"
     "make_plan (beam_tfrecord/plan/shard_plan.py:330)", stages.PLAN),
    # run read-back, in a writer process: the runs, and each annotation unpacked
    (WRITER, SERVE + ";write_shard (beam_tfrecord/write/shard_writer.py:171);"
     "prefetch (beam_tfrecord/storage/prefetch.py:32);select (beam_tfrecord/plan/runs.py:67);"
     "read_run (beam_tfrecord/plan/runs.py:55)", stages.READBACK),
    (WRITER, SERVE + ";write_shard (beam_tfrecord/write/shard_writer.py:171);"
     "prefetch (beam_tfrecord/storage/prefetch.py:32);unpack (beam_tfrecord/records/packed.py:49);"
     "record_converters.<locals>.from_plain (beam_tfrecord/records/plain.py:82);"
     "record_converters.<locals>.make (beam_tfrecord/records/plain.py:67)", stages.READBACK),
    # image read: on a read-ahead thread, its SHA-256 (native, under fetch), the header
    # checks, and the writer waiting for the read-ahead's result
    (MAIN, THREAD + ";Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:83);"
     "_WorkItem.run (concurrent/futures/thread.py:58);"
     "write_shard.<locals>.<lambda> (beam_tfrecord/write/shard_writer.py:168);"
     "fetch_image (beam_tfrecord/write/encode.py:203);fetch (beam_tfrecord/write/encode.py:197);"
     "read_bytes (beam_tfrecord/storage/files.py:255);"
     "_read_local (beam_tfrecord/storage/files.py:290)", stages.READ),
    (MAIN, THREAD + ";Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:90);"
     "_WorkItem.run (concurrent/futures/thread.py:58);"
     "write_shard.<locals>.<lambda> (beam_tfrecord/write/shard_writer.py:168);"
     "fetch_image (beam_tfrecord/write/encode.py:203);"
     "fetch (beam_tfrecord/write/encode.py:198)", stages.READ),
    (WRITER, SERVE + ";write_shard (beam_tfrecord/write/shard_writer.py:175);"
     "convert (beam_tfrecord/write/encode.py:215);prepare (beam_tfrecord/write/images.py:295);"
     "probe (beam_tfrecord/write/images.py:175);"
     "_check_complete (beam_tfrecord/write/images.py:101)", stages.READ),
    (WORKER, WORKER_BUNDLE + ";" + WRITE + ";convert (beam_tfrecord/write/encode.py:214);"
     "Tapped.__call__ (beam_tfrecord/write/contents.py:47);"
     "Future.result (concurrent/futures/_base.py:451);Condition.wait (threading.py:327)",
     stages.READ),
    # encode: the Example, through the schema and protos' layout
    (WRITER, SERVE + ";write_shard (beam_tfrecord/write/shard_writer.py:175);"
     "convert (beam_tfrecord/write/encode.py:227);"
     "Schema.encode (beam_tfrecord/schemas/__init__.py:134);"
     "encode (beam_tfrecord/schemas/od_api.py:144);"
     "ExampleLayout.serialize (beam_tfrecord/records/protos.py:185)", stages.ENCODE),
    (MAIN, BUNDLE + ";" + WRITE + ";convert (beam_tfrecord/write/encode.py:221);"
     "_in_displayed_frame (beam_tfrecord/write/encode.py:58)", stages.ENCODE),
    # frame and write: CRC32C, the writer's loop, the writer process's task loop
    (MAIN, BUNDLE + ";" + WRITE.replace(":175)", ":185)") + ";"
     "framing (beam_tfrecord/records/tfrecord.py:33);"
     "masked_crc32c (beam_tfrecord/records/tfrecord.py:21)", stages.WRITE),
    (WRITER, SERVE + ";write_shard (beam_tfrecord/write/shard_writer.py:189)", stages.WRITE),
    (WRITER, "<module> (<string>:1);serve (beam_tfrecord/write/shard_writer.py:558)",
     stages.WRITE),
    # copies by content
    (MAIN, BUNDLE + ";_SpillContents.process (beam_tfrecord/write/leakage.py:75)",
     stages.COPIES),
    # finalize
    (WORKER, WORKER_BUNDLE + ";Finalize.process (beam_tfrecord/finalize/transform.py:67);"
     "remove_work (beam_tfrecord/finalize/output.py:37);"
     "_delete_tree (beam_tfrecord/finalize/output.py:199);rmtree (shutil.py:732)",
     stages.FINALIZE),
    # Beam between our functions: side inputs, a coder, the runner's side of a bundle, gRPC,
    # its state sampler thread (native), a worker's threads without a Python frame
    (MAIN, BUNDLE + ";StateBackedSideInputMap.__getitem__ "
     "(apache_beam/runners/worker/bundle_processor.py:525);"
     "AsSingleton._from_runtime_iterable (apache_beam/pvalue.py:514)", stages.BEAM),
    (MAIN, BUNDLE + ";Map.<locals>.<lambda> (apache_beam/transforms/core.py:2128);"
     "FastCoder.decode (apache_beam/coders/coders.py:460)", stages.BEAM),
    (MAIN, CLI + ";run_convert (beam_tfrecord/cli/convert.py:85);"
     "run_to_end (beam_tfrecord/cli/process.py:151);Pipeline.run (apache_beam/pipeline.py:563);"
     "FnApiRunner.run_stages (apache_beam/runners/portability/fn_api_runner/fn_runner.py:465);"
     "BundleManager._send_input_to_worker "
     "(apache_beam/runners/portability/fn_api_runner/fn_runner.py:1218)", stages.BEAM),
    (MAIN, THREAD + ";Thread.run (threading.py:982);_serve (grpc/_server.py:1314)", stages.BEAM),
    (MAIN, THREAD + ";Thread.run (threading.py:982)", stages.BEAM),
    (WORKER, "", stages.BEAM),
    # start-up: the imports (wherever they happen), the interpreter before any frame
    (MAIN, CLI + ";run_convert (beam_tfrecord/cli/convert.py:45);"
     "pipeline_options (beam_tfrecord/cli/process.py:109);"
     "_find_and_load (<frozen importlib._bootstrap>:1176);"
     "_load_unlocked (<frozen importlib._bootstrap>:690);<module> (apache_beam/__init__.py:95)",
     stages.START),
    (WRITER, "<module> (<string>:1);_find_and_load (<frozen importlib._bootstrap>:1176);"
     "<module> (beam_tfrecord/write/shard_writer.py:25)", stages.START),
    (MAIN, "", stages.START),
    # pipeline construction: build() (a source's expand is not its parse), the runner's
    # translation before the first bundle
    (MAIN, CLI + ";run_convert (beam_tfrecord/cli/convert.py:56);"
     "build_pipeline (beam_tfrecord/cli/process.py:136);build (beam_tfrecord/pipeline.py:188);"
     "Pipeline.apply (apache_beam/pipeline.py:708);"
     "ReadCoco.expand (beam_tfrecord/sources/coco/transform.py:60)", stages.CONSTRUCT),
    (MAIN, CLI + ";run_convert (beam_tfrecord/cli/convert.py:85);"
     "run_to_end (beam_tfrecord/cli/process.py:151);Pipeline.run (apache_beam/pipeline.py:563);"
     "Pipeline.to_runner_api (apache_beam/pipeline.py:1135)", stages.CONSTRUCT),
    # other: the CLI, a thread pool between work items, a stack that lost its outer frames
    (MAIN, CLI + ";make_parser (beam_tfrecord/cli/options.py:300)", stages.OTHER),
    (MAIN, THREAD + ";Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:81)",
     stages.OTHER),
    (MAIN, "Signature.from_callable (inspect.py:3002);_signature_from_function (inspect.py:2500)",
     stages.OTHER),
]


@pytest.mark.parametrize("process, stack, expected", CAPTURED,
                         ids=[f"{i}-{e}" for i, (_, _, e) in enumerate(CAPTURED)])
def test_captured_stacks_map_to_their_stage(process, stack, expected):
  pid, cmd, frames, count = stages.parse_line(f"{process};{stack} 3" if stack
                                              else f"{process} 3")
  assert count == 3 and pid is not None
  assert stages.stage_of(frames, cmd) == expected, stages.classify(frames, cmd)


def test_a_subprocess_line_is_its_innermost_process():
  line = (f"{WRAPPER};{MAIN};{BUNDLE};"
          "_SpillPartitions.process (beam_tfrecord/plan/transform.py:40) 12")
  pid, cmd, frames, count = stages.parse_line(line)
  assert (pid, count) == (29398, 12)
  assert cmd.startswith("/work/main/.venv/bin/python -m beam_tfrecord.cli convert")
  assert frames[0].startswith("_run_module_as_main") and frames[-1].startswith("_SpillPartitions")
  # a writer's command has "; " in it
  pid, cmd, frames, _ = stages.parse_line(f"{WRAPPER};{MAIN};{WRITER};{SERVE} 1")
  assert pid == 1832 and cmd.endswith("serve(int(sys.argv[1])) 5")
  assert frames == SERVE.split(";")
  assert stages.parse_line("f (a.py:1);g (b.py:2) 4") == (None, "", ["f (a.py:1)",
                                                                     "g (b.py:2)"], 4)


def test_function_needles_win_over_module_needles():
  assert stages.stage_of(["unpack (beam_tfrecord/records/packed.py:49)"]) == stages.READBACK
  assert stages.stage_of(["pack (beam_tfrecord/records/packed.py:44)"]) == stages.PACK
  assert stages.stage_of(["image_root (beam_tfrecord/write/encode.py:170)"]) == stages.OTHER
  assert stages.stage_of(["fetch_image (beam_tfrecord/write/encode.py:203)",
                          "image_root (beam_tfrecord/write/encode.py:170)"]) == stages.READ


def test_unmapped_frames_of_ours_are_other_and_named():
  stage, what = stages.classify(BUNDLE.split(";") + ["_Brand.new (beam_tfrecord/brand/new.py:3)"])
  assert (stage, what) == (stages.OTHER, "unmapped: _Brand.new (beam_tfrecord/brand/new.py)")
  # a helper of ours called straight by Beam: ours, so not Beam's overhead
  stage, what = stages.classify(BUNDLE.split(";") + [
      "ErrorRecord.to_json (beam_tfrecord/records/model.py:125)"])
  assert stage == stages.OTHER and what.startswith("helper called by Beam")


def test_every_module_on_the_conversion_path_has_a_stage():
  """A module added under these packages must get a line in FRAME_STAGES (a stage, or None for
  a helper whose caller pays), or its samples would land in 'other'."""
  missing = []
  for folder in ("sources", "prepare", "plan", "write", "records", "storage", "schemas",
                 "finalize"):
    for path in sorted((REPO / "beam_tfrecord" / folder).rglob("*.py")):
      if path.name == "__init__.py" and folder not in ("schemas", "sources"):
        continue
      frame = f"some_function (beam_tfrecord/{path.relative_to(REPO / 'beam_tfrecord')}:1)"
      if stages._lookup(frame) is stages._UNMAPPED:
        missing.append(str(path.relative_to(REPO)))
  assert not missing, f"add these to benchmarks/stages.py FRAME_STAGES: {missing}"


def _raw(lines):
  return [f"{stack} {n}\n" for stack, n in lines]


PROFILE = _raw([
    (f"{WRAPPER}", 4),                                                  # the wrapper: left out
    (f"{WRAPPER};<module> (stages.py:700);main (stages.py:560);_wrapper_main (stages.py:500)", 6),
    (f"{WRAPPER};{MAIN}", 10),                                                   # start-up
    (f"{WRAPPER};{MAIN};{BUNDLE};{JOIN}", 30),                                   # source
    (f"{WRAPPER};{MAIN};{BUNDLE};StateBackedSideInputMap.__getitem__ "
     "(apache_beam/runners/worker/bundle_processor.py:525)", 20),               # Beam
    (f"{WRAPPER};{MAIN};{WRITER};{SERVE};write_shard (beam_tfrecord/write/shard_writer.py:189)",
     40),                                                                        # write
])


def test_summarize_leaves_the_wrapper_out_and_counts_by_process():
  profile = stages.summarize(PROFILE)
  assert profile.harness == 10
  assert profile.samples == 100
  assert profile.stages == {stages.START: 10, stages.SOURCE: 30, stages.BEAM: 20,
                            stages.WRITE: 40}
  assert profile.processes == {29398: 60, 1832: 40}
  assert profile.detail[stages.SOURCE] == {"join_image (beam_tfrecord/sources/coco/join.py)": 30}
  # the wrapper's pid given (its samples without a frame of its own are left out too)
  assert stages.summarize(PROFILE[:1] + PROFILE[2:], [29393]).harness == 4


def test_microseconds_per_image_from_the_share_of_the_samples():
  profile = stages.summarize(PROFILE)
  rows = {r["stage"]: r for r in stages.per_image(profile, cpu_s=2.0, images=1000)}
  assert [r for r in stages.STAGES if r in rows] == list(rows)  # pipeline order
  # share x CPU seconds / images x 1e6: 30% of 2 s over 1,000 images = 600 us
  assert rows[stages.SOURCE]["share"] == pytest.approx(0.30)
  assert rows[stages.SOURCE]["us_per_image"] == pytest.approx(600.0)
  assert rows[stages.WRITE]["us_per_image"] == pytest.approx(800.0)
  assert sum(r["us_per_image"] for r in rows.values()) == pytest.approx(2000.0)
  # no CPU seconds: shares of the samples only
  rows = stages.per_image(profile, None, None)
  assert rows[0]["us_per_image"] is None and rows[0]["share"] == pytest.approx(0.10)


def test_each_process_shares_out_its_own_cpu():
  """The writer process had 40 of 100 samples but used 1.5 of 2 s: its stages get 1.5 s."""
  profile = stages.summarize(PROFILE)
  seconds = stages.stage_seconds(profile, 2.0, {29398: 0.5, 1832: 1.5})
  assert seconds[stages.WRITE] == pytest.approx(1.5)
  assert seconds[stages.SOURCE] == pytest.approx(0.5 * 30 / 60)
  assert sum(seconds.values()) == pytest.approx(2.0)
  rows = {r["stage"]: r for r in stages.per_image(profile, 2.0, 1000, {29398: 0.5, 1832: 1.5})}
  assert rows[stages.WRITE]["us_per_image"] == pytest.approx(1500.0)
  assert rows[stages.WRITE]["share"] == pytest.approx(0.75)
  # a process psutil never saw gets what the others leave of the tree's CPU
  seconds = stages.stage_seconds(profile, 2.0, {29398: 0.5})
  assert seconds[stages.WRITE] == pytest.approx(1.5)
  # psutil's figures add up to less than the tree's: scaled up to it
  seconds = stages.stage_seconds(profile, 4.0, {29398: 0.5, 1832: 1.5})
  assert seconds[stages.WRITE] == pytest.approx(3.0)
  assert sum(seconds.values()) == pytest.approx(4.0)


def _report(**changes):
  report = {"command": "benchmarks/stages.py --images 20000 --markdown",
            "started": "2026-11-25 23:00", "git": "0123456789abcdef", "images": 20000,
            "dataset": "~90 KB JPEGs", "rate": 100, "nonblocking": True, "samples": 100,
            "cpu_s": 2.0, "wall_s": 1.5, "profiler_cpu_s": 0.4, "load_start": 1.2,
            "load_end": 1.8, "other_cores": 0.1, "disturbed": False, "max_other_cores": 0.5,
            "machine": machine.describe("Model name: AMD EPYC\nCPU(s): 2\n"
                                        "Thread(s) per core: 1\n")}
  report.update(changes)
  return report


def test_markdown_names_the_machine_the_command_and_the_load():
  profile = stages.summarize(PROFILE)
  rows = stages.per_image(profile, 2.0, 20000)
  text = stages.markdown(rows, _report())
  lines = text.splitlines()
  assert lines[0].startswith("Machine (`lscpu`): AMD EPYC, 2 CPUs, 1 thread per core")
  assert "`benchmarks/stages.py --images 20000 --markdown` on 2026-11-25 23:00 (commit 0123456)" \
      in text
  assert "load average 1.2-1.8, other work 0.10 cores." in text
  assert "disturbed" not in text
  assert "| stage | µs CPU / image | share | samples |" in lines
  assert "| source parse | 30.0 | 30.0% | 30 |" in lines  # 0.3 x 2 s / 20,000 x 1e6
  assert "| frame and write | 40.0 | 40.0% | 40 |" in lines
  assert lines[-1] == "| total | 100.0 | 100% | 100 |"
  assert [line.split(" | ")[0][2:] for line in lines if line.startswith("| ")][2:-1] == \
      [r["stage"] for r in rows]


def test_markdown_says_when_the_library_had_uncommitted_changes():
  profile = stages.summarize(PROFILE)
  text = stages.markdown(stages.per_image(profile, 2.0, 20000), _report(uncommitted=True))
  assert "(commit 0123456, with uncommitted changes)" in text


def test_markdown_marks_a_disturbed_run():
  profile = stages.summarize(PROFILE)
  text = stages.markdown(stages.per_image(profile, 2.0, 20000),
                         _report(other_cores=0.9, disturbed=True))
  assert "other work 0.90 cores — **disturbed** (more than 0.5 cores of other work" in text


def test_raw_summarised_again_from_its_report(tmp_path, capsys):
  """--raw FILE with the run's report beside it: the whole table again, µs included."""
  raw = tmp_path / "stages-1.txt"
  raw.write_text("".join(PROFILE))
  import json
  (tmp_path / "stages-1.json").write_text(json.dumps(_report(
      wrapper_pid=29393, process_cpu={"29398": 0.5, "1832": 1.5})))
  assert stages.main(["--raw", str(raw), "--markdown"]) == 0
  out = capsys.readouterr().out
  assert "| frame and write | 75.0 | 75.0% | 40 |" in out  # 1.5 s / 20,000 images
  # without a report: shares only
  os.remove(tmp_path / "stages-1.json")
  assert stages.main(["--raw", str(raw)]) == 0
  out = capsys.readouterr().out
  assert "shares only" in out and "frame and write" in out
