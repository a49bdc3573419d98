"""What a finished run says: the summary, its outcome's one line on stderr and the exit code;
--if-changed's line when the workers skipped the run."""
from __future__ import annotations

import os
import sys
from typing import List, Optional

from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from beam_tfrecord.storage import paths


def summarize(config: ConvertConfig, run_id: str, seconds: float, created: bool) -> int:
  """Print the summary and the outcome of a finished local run; its exit code."""
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.finalize.manifest import OUTCOMES
  manifest = _run_manifest(config.output, run_id)
  if manifest is None:
    print(f"beam-tfrecord: the pipeline finished without writing its manifest; "
          f"{config.output} is unchanged", file=sys.stderr)
    return EXIT_FAILED
  print(outputs.summary(manifest, config.output, seconds))
  code = OUTCOMES.get(manifest.get("outcome", ""), EXIT_FAILED)
  if code == EXIT_OK:
    return code
  report = outputs.run_dir(config.output, run_id)
  kept = ("no output was made" if created else f"the earlier output in {config.output} is "
          "unchanged")
  status = manifest["status"]
  if manifest.get("outcome") == "usage":  # read before the report may be removed below
    status = _usage_line(report, manifest) or status
  if code == EXIT_USAGE and created:  # nothing seen at all: leave no trace
    outputs.remove_leftovers(config.output)
    if not paths.is_remote(config.output):
      try:
        os.rmdir(config.output)
      except OSError:
        pass
    where = ""
  else:
    where = f"; this run's report (manifest, errors): {report}"
  print(f"beam-tfrecord: {status}; {kept}{where}", file=sys.stderr)
  return code


def _usage_line(report: str, manifest: dict) -> Optional[str]:
  """'FILE: what to do' from the first error whose reason only the command line fixes (the
  workers found it: the launcher reads no input whole), '(and N more)' when several; None
  when the run's error files cannot be read (the manifest's status is said instead)."""
  import json

  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord.finalize.manifest import USAGE_REASONS
  found: List[dict] = []
  try:
    for name in manifest["errors"]["files"]:
      with FileSystems.open(paths.child(report, name)) as f:
        for line in f:
          if b'"reason"' in line and any(r.encode() in line for r in USAGE_REASONS):
            record = json.loads(line)
            if record.get("reason") in USAGE_REASONS:
              found.append(record)
  except Exception:  # unreadable: the status still says what to do
    return None
  if not found:
    return None
  found.sort(key=lambda r: (str(r.get("key")), str(r.get("source"))))
  first = found[0]
  more = f" (and {len(found) - 1} more, see errors-*.jsonl)" if len(found) > 1 else ""
  return f"{first.get('key') or first.get('source')}: {first.get('message')}{more}"


def _run_manifest(output: str, run_id: str):
  """This run's manifest: in the output when it replaced it, else in its run directory."""
  from beam_tfrecord.finalize import output as outputs
  for uri in (paths.join(outputs.run_dir(output, run_id), outputs.MANIFEST),
              paths.join(output, outputs.MANIFEST)):
    try:
      manifest = outputs.read_json(uri)
    except Exception:
      continue
    if manifest.get("run_id") == run_id:
      return manifest
  return None


def skipped_line(result, config: ConvertConfig) -> Optional[str]:
  """--if-changed, after the job: the line to print when its finalize skipped the run (the
  sources unchanged: it counts the skip in a Beam counter), else None. A runner that reports
  no metrics is not taken for a skip: the run's report then says what happened."""
  from apache_beam.metrics.metric import MetricsFilter

  from beam_tfrecord.finalize import fingerprint
  try:
    counters = result.metrics().query(MetricsFilter()
                                      .with_namespace(fingerprint.SKIPPED_NAMESPACE)
                                      .with_name(fingerprint.SKIPPED_NAME))["counters"]
  except Exception:  # no metrics from this runner
    return None
  if not any(max(c.committed or 0, c.attempted or 0) > 0 for c in counters):
    return None
  # the run it was compared with (unchanged: the output, under our lock)
  manifest, last = fingerprint.recorded(config.output)
  return fingerprint.skipped_line(config.output, manifest.created if manifest else None,
                                 last or {})
