"""Finalize: label_map.pbtxt, the dataset card and manifest.json written last into the run
directory; a successful run then replaces the output (output.commit)."""
from __future__ import annotations

import dataclasses
import datetime
import json
import posixpath
from typing import Dict, List, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

import beam_tfrecord
from beam_tfrecord import schemas
from beam_tfrecord.finalize import card
from beam_tfrecord.finalize import fingerprint as fingerprints
from beam_tfrecord.finalize import lock as locks
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.finalize import publish
from beam_tfrecord.finalize import tfds_layout
from beam_tfrecord.finalize.manifest import (empty_splits, error_rate,
                                             lost_records, outcome_of,
                                             split_entries)
from beam_tfrecord.plan.previous import plan_record
from beam_tfrecord.records import label_map as label_maps
from beam_tfrecord.records.manifest import ErrorSummary, Manifest
from beam_tfrecord.prepare.select import EXCLUDED_PREFIX
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import paths, record_files
from beam_tfrecord.write import contents

MANIFEST = outputs.MANIFEST
LABEL_MAP = outputs.LABEL_MAP
LABELS_TXT = outputs.LABELS_TXT


class Finalize(beam.DoFn):
  """Writes label_map.pbtxt and manifest.json (last) into the run directory; a successful
  run then replaces the output (output.commit), a failed one stays there as its report."""

  def __init__(self, config, argv: Sequence[str], run_directory: str,
               run_id: str, declared: Sequence[str] = (),
               incremental: Optional[Dict] = None):
    self.config, self.argv = config, list(argv)
    self.run_directory, self.run_id = run_directory, run_id
    self.declared = sorted(declared)  # splits that must not end empty (source, --split)
    # --append onto an earlier version: {"previous": Previous, "reason": why every image is
    # encoded again (launch-time), or ''}
    self.incremental = incremental

  def process(self, _, stats, error_counts, label_map, error_files, beam_files, plan,
              if_changed=None, keypoints=()):
    """`if_changed` (--if-changed only): fingerprint.compare's answer, from the workers. When
    unchanged, the run replaces nothing: its run directory goes and the skip is counted.
    `keypoints`: the source's KeypointLayout, when it has keypoints (sources/keypoints.py)."""
    from apache_beam.io.filesystems import FileSystems
    if if_changed is not None and if_changed["unchanged"]:
      yield self._skip(if_changed)
      return
    committed = None if self.config.append else _committed(self.config.output, self.run_id)
    if committed is not None:  # a retried bundle: an earlier attempt of this step swapped
      yield committed
      return
    fingerprint = if_changed["current"] if if_changed else self.config.source_fingerprint
    run_directory = self.run_directory
    if not FileSystems.exists(run_directory) and not paths.is_remote(run_directory):
      FileSystems.mkdirs(run_directory)  # nothing was written: no image, no error
    outputs.remove_work(run_directory, self.run_id)  # the shards are written: stats say so
    if self.config.append:  # shards in final order, none empty (publish.py names them)
      stats = publish.name_segments(stats, self.config.shard_name_template)
      publish.rename_indexes(run_directory, stats)
    appended = (publish.append_summary(self.incremental, stats)
                if self.config.append and self.incremental is not None else None)
    # an --append that changed nothing is not published: linking its kept shards (and
    # removing the links) would only move their change time, the stamp the next run checks
    unchanged = publish.nothing_changed(appended)
    if not unchanged:
      _share_kept(run_directory, stats)
    _name_shards(run_directory, stats)
    outputs.write_atomic(run_directory, LABEL_MAP,
                         label_maps.to_text(label_map).encode())
    schema = schemas.from_options(self.config.encode)
    if self.config.first_id() == 0:  # ids from 0: labels.txt lines are ids
      outputs.write_atomic(run_directory, LABELS_TXT,
                           label_maps.to_lines(label_map).encode())
    splits = split_entries(stats, beam_files)
    layout = keypoints[0] if keypoints else None
    if self.config.layout == "tfds":
      _write_tfds_metadata(run_directory, self.config, splits, label_map, layout)
    totals = {k: sum(getattr(e, k) for e in splits.values())
              for k in ("examples", "images", "objects", "bytes", "clipped_boxes",
                        "reoriented_images")}
    reasons = {k: v for k, v in sorted(error_counts.items())
               if not k.startswith(("level:", EXCLUDED_PREFIX, contents.PREFIX))}
    levels = {k[6:]: v for k, v in sorted(error_counts.items()) if k.startswith("level:")}
    excluded = {k[len(EXCLUDED_PREFIX):]: v for k, v in sorted(error_counts.items())
                if k.startswith(EXCLUDED_PREFIX)}
    leakage = contents.leakage(error_counts, totals["images"])
    weighed = contents.weighed(levels, leakage)  # a copy counts as a rejection
    rate = error_rate(totals["images"], weighed)  # per image: records may be several or none
    outcome, status = outcome_of(totals, weighed, rate, self.config.max_error_rate,
                                 lost_records(plan.splits, stats),
                                 empty_splits(self.declared, splits), reasons)
    if outcome == "ok" and not locks.held_by(self.config.output, self.run_id):
      outcome, status = "lock_lost", ("failed: another run took over the output lock "
                                      "(--break-lock) while this one ran")
    # --append: the version's files made read-only, then stamped for the next run's checks
    # (none when nothing changed: its kept files were not linked, and it is not published)
    stamps = (publish.seal(run_directory, stats)
              if self.config.append and outcome == "ok" and not unchanged else None)
    files = sorted({n for n in outputs.entries(run_directory) if not n.startswith(".")
                    and not n.startswith("beam-temp")} | {card.NAME, MANIFEST})
    manifest = Manifest(
        version=beam_tfrecord.__version__, status=status, outcome=outcome, run_id=self.run_id,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        schema=schema.name, format=self.config.format, sink=self.config.sink,
        args=tuple(self.argv), source_fingerprint=fingerprint,
        config=dataclasses.asdict(dataclasses.replace(self.config,
                                                      source_fingerprint=fingerprint)),
        features=schema.manifest_features(keypoints=layout is not None),
        label_map=dict(sorted(label_map.items(), key=lambda kv: kv[1])),
        keypoints=layout.to_json() if layout is not None else None,
        # where each shard begins and its catalog partition: what --append reads (plan/previous)
        shard_plan=(plan_record(plan, stats, stamps) if self.config.sink == "shards"
                    else None),
        incremental=appended,
        # --classes/--class-map: objects (or image labels) dropped, per source class
        excluded_classes=excluded if self.config.selection else None,
        splits=splits, totals=totals,
        errors=ErrorSummary(count=sum(reasons.values()), rate=rate, by_level=levels,
                            by_reason=reasons, files=tuple(sorted(
                                posixpath.basename(f.replace("\\", "/")) for f in error_files))),
        leakage=leakage, files=tuple(files))
    outputs.write_atomic(run_directory, card.NAME,
                         card.render(manifest).encode("utf-8"))
    # the bytes --append's publish claims a version with on gs:// (publish.manifest_json)
    outputs.write_atomic(run_directory, MANIFEST, publish.manifest_json(manifest))
    outputs.kill_point("finalize")
    # --append: the launcher checks the version and publishes it (publish.py)
    if outcome == "ok" and not self.config.append:
      protected = [n for n in (outputs.name_inside(p, self.config.output)
                               for p in self.config.input_paths()) if n]
      outputs.commit(self.config.output, run_directory, manifest, protected)
    # else: the run directory stays as the failed run's report, shards included, so that
    # `verify`/`inspect` can look at it; the next run into this output removes it
    yield manifest.to_json()  # the manifest as written: what the launcher and tests read

  def _skip(self, if_changed: Dict) -> Dict:
    """--if-changed, sources unchanged: the output stays as it is, byte for byte; this run's
    directory (shards written before the skip was known, scratch) is removed, and the skip is
    counted for the launcher (fingerprint.SKIPPED_NAME), which prints the line."""
    import logging
    outputs.remove_work(self.run_directory, self.run_id)
    _remove_tree(self.run_directory)
    Metrics.counter(fingerprints.SKIPPED_NAMESPACE, fingerprints.SKIPPED_NAME).inc()
    logging.getLogger(__name__).info(fingerprints.skipped_line(
        self.config.output, if_changed["created"], if_changed["current"]))
    return {"outcome": "unchanged", "run_id": self.run_id,
            "source_fingerprint": if_changed["current"], "created": if_changed["created"]}


def _committed(output: str, run_id: str) -> Optional[Dict]:
  """The manifest this run swapped into the output, when an earlier attempt of Finalize got
  that far (a runner retries a failed bundle), with a swap it left part way rolled forward;
  None otherwise. Done again, the step would find the run directory emptied by the swap and
  write a manifest without the shards, whose swap then deletes them from the output."""
  try:
    journal = outputs.pending_swap(output)
  except Exception:  # unreadable: not this run's to finish (the next run's launcher looks)
    journal = None
  if isinstance(journal, dict) and journal.get("run_id") == run_id:
    outputs.recover(output)
  try:
    manifest = outputs.read_json(paths.join(output, MANIFEST))
  except Exception:  # none yet (a first run), or being replaced by this run
    return None
  return manifest if isinstance(manifest, dict) and manifest.get("run_id") == run_id else None


def _share_kept(run_directory: str, stats: Sequence[Dict]) -> None:
  """--append: the shards kept as they were (and their catalog partitions) linked, or copied
  server side, from the earlier version into the run directory under their names. Their
  --index-files indexes are not: the writer wrote them anew from the kept file."""
  for s in stats:
    if s.get("kept_from"):
      outputs.share_file(s["kept_from"], run_directory, s["path"])
      outputs.share_file(s["kept_index"], run_directory, s["index"])


def _write_tfds_metadata(run_directory: str, config, splits: Dict,
                         label_map: Dict[str, int], keypoints=None) -> None:
  """--layout tfds: dataset_info.json, features.json and the ClassLabel's names beside the
  shards (finalize/tfds_layout.py), so that TFDS loads the directory as it is."""
  tfds_layout.check_label_ids(label_map)
  option = config.schema_option()
  encoding = config.image_format if config.image_format in ("jpeg", "png") else None
  features = tfds_layout.features(option, len(label_map), config.include_masks, encoding,
                                  keypoints.size if keypoints is not None else None)
  description = (f"{config.dataset_name}: converted by beam-tfrecord {beam_tfrecord.__version__}"
                 f" from {config.format} annotations ("
                 f"{', '.join(paths.parse_assignment(i)[1] for i in config.inputs)}).")
  info = tfds_layout.dataset_info(config.dataset_name, config.dataset_version, splits, option,
                                  description, file_format=config.file_format)
  for name, text in ((tfds_layout.FEATURES, json.dumps(features, indent=4, sort_keys=True)),
                     (tfds_layout.DATASET_INFO, json.dumps(info, indent=2, sort_keys=True)),
                     (tfds_layout.label_file(option), tfds_layout.label_names(label_map))):
    outputs.write_atomic(run_directory, name, text.encode("utf-8"))


def _remove_tree(directory: str) -> None:
  """Delete a run directory and everything in it (local or an object-store prefix)."""
  from apache_beam.io.filesystems import FileSystems
  if paths.is_remote(directory):
    try:
      found = [m.path for m in FileSystems.match([directory.rstrip("/") + "/**"])[0]
               .metadata_list]
    except Exception:  # BeamIOError: nothing there
      found = []
    if found:
      FileSystems.delete(found)
  else:
    import shutil
    shutil.rmtree(directory, ignore_errors=True)


def _name_shards(run_directory: str, stats: Sequence[Dict]) -> None:
  """--shard-name-template: shards were written under unique default names (their final
  names need {count}); name them inside the run directory, before the manifest lists the
  run's files, so that output.commit moves them and --overwrite owns them by these names.
  Idempotent (a retried finalize finds them named)."""
  from apache_beam.io.filesystems import FileSystems
  shards = [s for s in stats if s["shard"] is not None]
  finals = [s["path"] for s in shards]
  if len(set(finals)) != len(finals):  # a {count} made two names equal: move nothing
    raise RuntimeError(f"shard names clash after writing: {sorted(finals)}")
  # names checked here too (paths.child), not only where the template was checked: a rename
  # to a name with a separator would leave the run directory
  moves = [(paths.child(run_directory, s["staged"]), paths.child(run_directory, s["path"]))
           for s in shards if s.get("staged")]
  # --index-files: each shard's index (`index_file`, as written) follows it
  moves += [(paths.child(run_directory, s["index_file"]),
             paths.child(run_directory, record_files.index_name(s["path"])))
            for s in shards if s.get("index_file")
            and s["index_file"] != record_files.index_name(s["path"])]
  moves = [(src, dst) for src, dst in moves if FileSystems.exists(src)]
  taken = {src for src, _ in moves} & {dst for _, dst in moves}
  if taken:  # a final name is another shard's staging name: renaming would overwrite it
    raise RuntimeError(f"shard names clash with staging names: {sorted(taken)}")
  if moves:
    FileSystems.rename([src for src, _ in moves], [dst for _, dst in moves])


def count_keys(error: ErrorRecord) -> List[str]:
  """Counter names for one error: its reason and its level (counted in Beam metrics too)."""
  Metrics.counter("beam_tfrecord.errors", error.reason).inc()
  Metrics.counter("beam_tfrecord.error_levels", error.level).inc()
  return [error.reason, f"level:{error.level}"]
