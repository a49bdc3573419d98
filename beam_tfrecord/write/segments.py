"""--append: writing one shard file of a new version from the earlier one's and the changes
the sort found (plan/compare). Beam-free for local files (writer processes import it).

An earlier file none of whose rows changed or went, and whose records all checked out, is
kept whole: nothing is read but its catalog partition, whose columns give its stats, errors
and content digests. An earlier file with changes is rewritten from its rows in order: an
unchanged image's records copied, a changed one's (or one whose records did not check out)
encoded again, a removed one's left out. A new delta shard holds the images added in its
base ranges. Memory: one catalog partition (a shard's rows), and the changes of its runs.
"""
from __future__ import annotations

import marshal
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import pyarrow.compute as pc

from beam_tfrecord.plan import compare, runs
from beam_tfrecord.records import batches
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import catalog, paths
from beam_tfrecord.write import contents as content_digests


class Outcome(NamedTuple):
  """What becomes of a segment: no file ("empty"), the earlier file kept whole ("kept": its
  errors and contents here), or a file written ("write") from write_catalogued's `items`
  (the `earlier` file's records copied where they say so)."""
  kind: str
  items: Iterable[Tuple] = ()
  earlier: Optional[str] = None
  errors: List[ErrorRecord] = []
  found: Optional[content_digests.Collected] = None


def segment(task, stats: Dict) -> Outcome:
  """The outcome of an --append segment task (shard_writer.ShardTask with `segment`),
  counting in `stats` what became of its images."""
  stats["segment"] = list(task.segment)
  stats["delta"], stats["new"] = task.delta, task.earlier is None
  earlier, check = task.earlier, task.check
  if earlier is not None and (check is None or not check.usable):
    # its images count as added and the append becomes a full version (cli/append)
    return Outcome("empty")
  changes = _changes(task) if task.changes else []  # the plan counted the runs' changes
  if earlier is None:
    if not changes:
      return Outcome("empty")
    stats["added"] = len(changes)
    return Outcome("write", (_annotated(blob) for _, blob in changes))
  if not changes and not check.bad and not check.all_bad:
    return _kept(task, stats)
  table = compare.checked_table(earlier)
  by_row = dict(changes)
  stats["removed"] = sum(1 for blob in by_row.values() if not blob)
  if stats["removed"] == table.num_rows:
    return Outcome("empty")
  return Outcome("write", _rewritten(catalog.entries_of(table), by_row, check, stats),
                 earlier.shard)


def _changes(task) -> List[Tuple[int, bytes]]:
  """(row, packed annotation or b"" when removed) of an earlier file's changes, or (base
  range, packed annotation) of a delta shard's added images, in shard order, from the runs
  its ranges meet; as many as the plan counted, else the runs are not this run's."""
  first, end = task.segment
  wanted = task.earlier.index if task.earlier is not None else -1
  found = [(row, blob) for path in task.change_runs
           for _, file, row, blob in runs.read_changes(path)
           if file == wanted and (wanted >= 0 or first <= row < end)]
  if len(found) != task.changes:
    raise RuntimeError(f"{task.split} shard {task.shard}: the sorted runs hold {len(found)} "
                       f"changes, the plan counted {task.changes}")
  return found


def _annotated(blob: bytes):
  image = marshal.loads(blob)
  return batches.FROM_PLAIN(image), catalog.digest_plain(image), None


def _rewritten(entries: List[catalog.Entry], changes: Dict[int, bytes], check,
               stats: Dict) -> Iterator[Tuple]:
  """write_catalogued's items of a rewritten earlier file, counting what became of each row."""
  for row, entry in enumerate(entries):
    blob = changes.get(row)
    if blob is None:
      stats["unchanged"] += 1
      yield None, None, entry
    elif blob:
      if check.is_bad(row):
        stats["unchanged"] += 1
        stats["damaged"] = stats.get("damaged", 0) + 1
      else:
        stats["changed"] += 1
      yield _annotated(blob)


def _kept(task, stats: Dict) -> Outcome:
  """An earlier file kept whole: its stats, errors and contents from its partition's
  columns, not one Python object a row."""
  earlier = task.earlier
  table = compare.checked_table(earlier)
  if not paths.is_remote(earlier.shard) and \
      catalog.file_stamp(earlier.shard) != task.check.stamp:
    raise RuntimeError(f"the earlier shard {earlier.shard} changed during the run")
  written = table.filter(pc.invert(table.column("rejected")))
  stats["rejected"] = table.num_rows - written.num_rows
  stats["images"] = written.num_rows
  for name, column in (("examples", "records"), ("objects", "objects"),
                       ("clipped", "clipped"), ("reoriented", "reoriented")):
    stats[name] = int(pc.sum(written.column(column)).as_py() or 0)
  labels = pc.list_flatten(written.column("labels"))
  stats["classes"] = {item["values"]: item["counts"]
                      for item in pc.value_counts(labels).to_pylist()}
  stats["unchanged"] = stats["reused"] = table.num_rows
  errors: List[ErrorRecord] = []
  for entry in catalog.entries_of(table.filter(pc.not_equal(table.column("errors"), ""))):
    errors.extend(entry.error_records())
  found = content_digests.Collected(task.split, task.contents_directory)
  has_content = written.filter(pc.not_equal(written.column("content"), ""))
  for digest, key, uri in zip(*(has_content.column(n).to_pylist()
                                for n in ("content", "key", "uri"))):
    found.add(digest, key, uri)
  stats["kept_from"], stats["kept_index"] = earlier.shard, earlier.catalog
  stats["index_digest"] = earlier.digest
  return Outcome("kept", errors=errors, found=found)
