"""`convert --append --output DEST`: one version of a versioned output (storage/versions.py).

Under DEST's lock: versions never published are removed; LATEST's version is read as input
to check (plan/previous), never as truth; when the sources' fingerprint (a listing and a
stat, no image read, no Beam job) equals the one LATEST's manifest records, nothing is done.
Otherwise the pipeline runs into a run directory: an append (earlier shard files kept,
rewritten or joined by delta shards) or a full version with a fresh plan (the first, on
--compact, past the compaction thresholds, or when a setting that shapes records changed).
The version is checked, then published (finalize/publish.py), then --keep retires old ones.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
import uuid
from typing import Optional, Tuple

from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import EXIT_FAILED, EXIT_OK, UsageError, named_few
from beam_tfrecord.storage import paths, versions

# Compaction (a full version with a fresh plan) when a split's delta shards hold more than
# this share of its records, or number more than MAX_DELTA_SHARDS: readers open every file,
# and small files piling up is what users of append-only tables complain of (lance 5194).
MAX_DELTA_SHARE = 0.10
MAX_DELTA_SHARDS = 64


def compaction_reason(manifest) -> str:
  """'' or why LATEST's version should be compacted (its delta shards, per split)."""
  for split, entry in sorted((manifest.shard_plan or {}).items()):
    flags = entry.get("delta") or []
    info = manifest.splits.get(split)
    if info is None or len(flags) != len(info.shards):
      continue
    deltas = [s for s, delta in zip(info.shards, flags) if delta]
    records = sum(s.examples or 0 for s in deltas)
    # a large split takes as many delta shards as it has base shards before compaction
    limit = max(MAX_DELTA_SHARDS, len(info.shards) - len(deltas))
    if len(deltas) > limit:
      return f"split {split!r} has {len(deltas)} delta shards (more than {limit})"
    if info.examples and records > MAX_DELTA_SHARE * info.examples:
      return (f"delta shards hold {records / info.examples:.0%} of split {split!r} (more "
              f"than {MAX_DELTA_SHARE:.0%})")
  return ""


# the settings that size shards, as their options: an append keeps the earlier plan's sizes
SIZING = {"num_shards": "--num-shards", "shard_size_mb": "--shard-size-mb",
          "records_per_shard": "--records-per-shard"}


def sizing_changes(config: ConvertConfig, before: dict) -> str:
  """'' or the sizing options whose value differs from the earlier version's, with both."""
  def shown(value):
    return "not given" if value is None else f"{value:g}" if isinstance(value, float) \
        else str(value)
  return ", ".join(f"{option} {shown(before.get(field))} -> {shown(getattr(config, field))}"
                   for field, option in SIZING.items()
                   if getattr(config, field) != before.get(field))


def oversized_delta(manifest) -> str:
  """'' or why a new delta shard is too large: it holds more than REBALANCE_FACTOR times the
  images its split's delta shards are sized for (shard_plan.delta_target). The plan cuts
  delta shards from the images added in each base range (shard_plan.delta_groups), so only
  a range that alone gained that many (an addition several times the dataset) makes one."""
  from beam_tfrecord.plan.shard_plan import REBALANCE_FACTOR, delta_target
  largest = (manifest.incremental or {}).get("largest_delta") or {}
  for split, entry in sorted((manifest.shard_plan or {}).items()):
    target = delta_target(entry.get("planned") or [])
    if entry.get("planned") and largest.get(split, 0) > REBALANCE_FACTOR * target:
      return (f"a new delta shard of split {split!r} would hold {largest[split]:,} images, "
              f"planned for {target:,}")
  return ""


def decide(config: ConvertConfig, dest: str, latest: Optional[int]
           ) -> Tuple[Optional[str], str, object]:
  """(the earlier version to append to or None, why a full version when None, its manifest)."""
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.plan import previous as previous_output
  if latest is None:
    return None, "the first version", None
  base = versions.version_dir(dest, latest)
  try:
    manifest = outputs.load_manifest(base)
  except Exception as e:
    return None, f"the manifest of {base} cannot be read ({type(e).__name__})", None
  if manifest.outcome != "ok":
    return None, f"{base} is not a successful run", manifest
  if config.compact:
    return None, "--compact", manifest
  try:
    previous = previous_output.from_manifest(base, manifest, "--append")
  except UsageError as e:
    return None, str(e).split(": ", 1)[-1], manifest
  changed = previous_output.changed_settings(config.record_settings(), previous,
                                             config.record_defaults())
  if changed:
    return None, f"settings that shape records changed: {', '.join(changed)}", manifest
  sizing = sizing_changes(config, previous.settings)
  if sizing:  # appends keep the earlier plan: the new size takes a fresh one
    return None, f"the shard size changed ({sizing})", manifest
  reason = compaction_reason(manifest)
  if reason:
    return None, f"compaction: {reason}", manifest
  return base, "", manifest


def run_append(config: ConvertConfig, beam_args, argv, break_lock: bool = False) -> int:
  from beam_tfrecord.finalize import fingerprint
  from beam_tfrecord.finalize import lock as locks
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.finalize import publish
  from beam_tfrecord.sources import registry
  dest = config.output
  local = not paths.is_remote(dest)
  check_destination(dest)
  registry.check(config)  # the pre-run input checks of a plain convert
  if local:
    os.makedirs(dest, exist_ok=True)
  start = time.monotonic()
  run_id = uuid.uuid4().hex
  lock = locks.OutputLock(dest, run_id, break_lock)
  try:
    lock.acquire()
  except locks.LockNotWritten as e:
    print(f"beam-tfrecord: {dest}: {e}", file=sys.stderr)
    return EXIT_FAILED
  with lock:
    outputs.remove_leftovers(dest, keep=[outputs.LOCK])
    try:
      latest = versions.read_latest(dest)
    except versions.DamagedVersions as e:
      raise UsageError(f"--append: {e}; it is not what this tool writes, so nothing was "
                       "changed (move it away to start a new versioned output)") from None
    publish.remove_unpublished(dest, latest)
    base, reason, base_manifest = decide(config, dest, latest)
    current = fingerprint.compute(config)  # a listing and a stat: no image read
    # the fingerprint covers the settings that shape records too: equal, no setting changed
    if base_manifest is not None and not config.compact and \
        fingerprint.same(current, base_manifest.source_fingerprint):
      print(f"unchanged: the sources equal version {versions.version_name(latest)}'s "
            f"({current['files']:,} files); nothing published ({time.monotonic() - start:.1f} s)"
            + _retired(dest, config, latest))
      return EXIT_OK
    number = max(versions.numbers(dest) + [latest or 0]) + 1
    run = dataclasses.replace(config, append_base=base, source_fingerprint=current)
    code, manifest = _convert(run, beam_args, argv, run_id)
    if code == EXIT_OK and base is not None:
      why = oversized_delta(manifest)
      if why:
        code, manifest = "fallback", why
    if code == "fallback":  # the append did not add up (a damaged earlier version): in full
      print(f"beam-tfrecord: warning: {manifest}; making a full version instead",
            file=sys.stderr)
      outputs.remove_leftovers(dest, keep=[outputs.LOCK])
      run = dataclasses.replace(run, append_base=None)
      base, reason = None, manifest
      code, manifest = _convert(run, beam_args, argv, run_id)
    if code != EXIT_OK or manifest is None:
      return code
    run_directory = outputs.run_dir(dest, run_id)
    incremental = manifest.incremental
    if base is not None and publish.nothing_changed(incremental):
      outputs.remove_leftovers(dest, keep=[outputs.LOCK])
      print(f"unchanged: no image or annotation changed since version "
            f"{versions.version_name(latest)} (the source files did); nothing published"
            + _retired(dest, config, latest))
      return EXIT_OK
    publish.tidy(run_directory)
    kept = [s.path for split in manifest.splits.values() for s in split.shards
            if _is_kept(s.path, run_directory, base)]
    problem = publish.check_version(run_directory, manifest, kept)
    if problem:
      print(f"beam-tfrecord: the new version does not check out ({problem}); LATEST is "
            f"unchanged; this run's files: {run_directory}", file=sys.stderr)
      return EXIT_FAILED
    try:
      target = publish.publish(dest, run_directory, number, latest, run_id,
                               publish.manifest_json(manifest))
    except publish.LostRace as e:
      outputs.remove_leftovers(dest, keep=[outputs.LOCK])
      print(f"beam-tfrecord: {e}; this run published nothing", file=sys.stderr)
      return EXIT_FAILED
    retired = _retire(dest, config, number)
  print(outputs.summary(manifest, target, time.monotonic() - start))
  if base is None:
    print(f"  full version: {reason}")
  line = f"published {versions.version_name(number)}: {dest}/LATEST -> versions/" \
         f"{versions.version_name(number)}"
  if retired:
    line += f"; retired {', '.join(versions.version_name(n) for n in retired)}"
  print(line)
  return EXIT_OK


# what deploy/cron/beam-tfrecord-cron.sh keeps in DEST: its flock file and its log folder
CRON_NAMES = (".lock", "logs")


def check_destination(dest: str) -> None:
  """UsageError (one line, before anything is created) unless DEST is missing, empty or a
  versioned output: only LATEST, versions/, our own hidden names and the cron wrapper's
  (CRON_NAMES). A directory of anything else (`--append --output ~/`) is not ours to hold
  versions in, as a plain convert refuses."""
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.storage.layout import OWN_PREFIX
  names = outputs.entries(dest)
  if outputs.MANIFEST in names:
    raise UsageError(f"--append: {dest} holds an ordinary output (manifest.json); a versioned "
                     "output needs a directory of its own (DEST/versions/, DEST/LATEST)")
  foreign = [n for n in names if n not in (versions.LATEST, versions.VERSIONS) + CRON_NAMES
             and not n.startswith(OWN_PREFIX)]
  if foreign:
    raise UsageError(f"--append: {dest} holds files this tool did not write "
                     f"({named_few(foreign, 10)}); a versioned output needs a directory of "
                     "its own. Nothing was changed")


def _retire(dest: str, config: ConvertConfig, latest: int) -> list:
  """--keep: the versions publish.retire deleted (none without --keep)."""
  from beam_tfrecord.finalize import publish
  if not config.keep:
    return []
  return publish.retire(dest, config.keep, latest, config.retain_hours * 3600)


def _retired(dest: str, config: ConvertConfig, latest: int) -> str:
  """--keep on a run that publishes nothing: retention still applies (a lowered K takes
  effect); '' or the line's tail naming what went."""
  gone = _retire(dest, config, latest)
  return f"; retired {', '.join(versions.version_name(n) for n in gone)}" if gone else ""


def _is_kept(name: str, run_directory: str, base: Optional[str]) -> bool:
  """True when a shard of the new version is a file of the version before (a hard link)."""
  if base is None or paths.is_remote(run_directory):
    return False
  try:
    st = os.lstat(paths.child(run_directory, name))
  except OSError:
    return False
  return st.st_nlink > 1


def _convert(config: ConvertConfig, beam_args, argv, run_id: str):
  """Run the pipeline into DEST's run directory (the lock is held). (EXIT_OK, manifest),
  ("fallback", why) when an append's accounting did not add up, or (exit code, None)."""
  from beam_tfrecord.cli.process import (build_pipeline, pipeline_options, private_tempdir,
                                         run_to_end, terminate_as_exit)
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.finalize.manifest import OUTCOMES
  options = pipeline_options(beam_args)
  with private_tempdir(), terminate_as_exit():
    p = build_pipeline(options, config, argv, run_id)
    code, _ = run_to_end(p, options, outputs.run_dir(config.output, run_id),
                         "LATEST is unchanged")
  if code is not None:
    return code, None
  run_directory = outputs.run_dir(config.output, run_id)
  try:
    manifest = outputs.load_manifest(run_directory)
  except Exception:
    print("beam-tfrecord: the pipeline finished without writing its manifest; LATEST is "
          "unchanged", file=sys.stderr)
    return EXIT_FAILED, None
  damaged = manifest.errors.by_reason.get("earlier_index_damaged", 0) if config.append_base \
      else 0
  if damaged and manifest.outcome in ("ok", "lost_records"):
    # which images were a damaged index's cannot be told: they would be counted as added
    return "fallback", (f"{damaged} catalog partition{'s' * (damaged != 1)} of the earlier "
                        "version cannot be read or differ from what it recorded "
                        "(earlier_index_damaged)")
  if manifest.outcome == "lost_records" and config.append_base:
    return "fallback", f"the append's counts do not add up ({manifest.status})"
  if manifest.outcome != "ok":
    print(outputs.summary(manifest, run_directory))
    print(f"beam-tfrecord: {manifest.status}; LATEST is unchanged; this run's report: "
          f"{run_directory}", file=sys.stderr)
    return OUTCOMES.get(manifest.outcome, EXIT_FAILED), None
  return EXIT_OK, manifest
