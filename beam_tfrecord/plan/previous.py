"""An earlier version as the start of an --append: its shard plan, its shards and their
catalog partitions, and the settings its records were encoded with, from its manifest.
Read on the launcher: the manifest is O(splits x shards + classes). Pure and Beam-free.

The manifest's `shard_plan` records, per split, where each shard but the first begins (a
bound: the place in the shard order, hash, key and uri, of its first image when the plan was
made) and each shard's planned size; an append keeps those bounds, so an image
keeps its shard across dataset versions (plan/shard_plan.make_plan).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from beam_tfrecord.errors import UsageError
from beam_tfrecord.plan import compare
from beam_tfrecord.plan.compare import EarlierFile
from beam_tfrecord.plan.shard_plan import (Bound, PreviousSplit, ShardPlan,
                                           sizes_of)
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.storage import paths, record_files
from beam_tfrecord.storage.layout import MANIFEST

MAX_MANIFEST_BYTES = 256 << 20

@dataclasses.dataclass(frozen=True)
class Previous:
  """What a run needs of an earlier output."""
  directory: str
  splits: Dict[str, PreviousSplit]            # its plan, by split
  shards: Dict[str, Tuple[str, ...]]          # its shard files by split, in shard order
  indexes: Dict[str, Tuple[str, ...]]         # its catalog partitions by split ('' where none)
  label_map: Dict[str, int]
  settings: Dict[str, Any]                    # its config, as the manifest records it
  images: Dict[str, int]                      # images per split
  # what each shard file and catalog partition was when its version was made ('' and -1
  # where not recorded): the file's stamp (catalog.file_stamp), the partition's digest
  # (catalog.file_digest) and its rows
  stamps: Dict[str, Tuple[str, ...]] = dataclasses.field(default_factory=dict)
  index_digests: Dict[str, Tuple[str, ...]] = dataclasses.field(default_factory=dict)
  index_rows: Dict[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)
  sizes: Dict[str, Tuple[int, ...]] = dataclasses.field(default_factory=dict)  # shard bytes

  @property
  def file_format(self) -> str:
    """Its shards' --file-format (a version from before the option: tfrecord)."""
    return self.settings.get("file_format") or record_files.TFRECORD

  def recorded(self, split: str, shard: int) -> Tuple[str, str, int]:
    """(the shard file's stamp, its catalog partition's digest and row count) as its version
    recorded them, '' and -1 where it did not (an older version): a file that differs is
    checked before any use, a partition that differs is not used."""
    stamps, digests = self.stamps.get(split, ()), self.index_digests.get(split, ())
    rows = self.index_rows.get(split, ())
    return (stamps[shard] if shard < len(stamps) else "",
            digests[shard] if shard < len(digests) else "",
            rows[shard] if shard < len(rows) else -1)

  def earlier_files(self, split: str) -> Tuple[EarlierFile, ...]:
    """Each shard file of `split`, with its catalog partition and what its version recorded
    of both (plan/compare)."""
    files = self.shards.get(split, ())
    indexes = self.indexes.get(split, ()) or ("",) * len(files)
    return compare.earlier_files(
        split, self.splits[split].bounds, self.splits[split].segments_or_base(),
        [paths.child(self.directory, name) for name in files],
        [paths.child(self.directory, name) if name else "" for name in indexes],
        [self.recorded(split, i) for i in range(len(files))], self.file_format,
        self.sizes.get(split, ()))


def encode_bound(bound: Bound) -> List[str]:
  return [f"{bound[0]:016x}", bound[1], bound[2]]


def decode_bound(item: Sequence[str]) -> Bound:
  if len(item) != 3:
    raise ValueError(f"a bound has 3 fields, not {len(item)}")
  return (int(item[0], 16), str(item[1]), str(item[2]))


def load(directory: str, option: str = "--append") -> Previous:
  """The earlier output in `directory`; UsageError (one line) when there is none to use."""
  from beam_tfrecord.storage.files import read_text
  uri = paths.join(directory, MANIFEST)
  try:
    manifest = json.loads(read_text(uri, MAX_MANIFEST_BYTES))
  except FileNotFoundError:
    raise UsageError(f"{option} {directory}: no manifest.json there (not an output of this "
                     "tool, or not finished)") from None
  except Exception as e:
    raise UsageError(f"{option} {directory}: its manifest.json cannot be read "
                     f"({type(e).__name__}: {e})") from None
  if not isinstance(manifest, dict) or manifest.get("outcome") != "ok":
    raise UsageError(f"{option} {directory}: its manifest.json is not that of a successful "
                     "run")
  return from_manifest(directory, manifest, option)


def from_manifest(directory: str, manifest: Union[Manifest, Mapping[str, Any]],
                  option: str = "--append") -> Previous:
  try:
    manifest = Manifest.of(manifest)
    plan = manifest.shard_plan
    if not isinstance(plan, dict):
      raise ValueError("it has no shard_plan (written by an older version)")
    splits, shards, indexes, images, stamps, digests, rows, sizes = {}, {}, {}, {}, {}, {}, \
        {}, {}
    for split, entry in plan.items():
      bounds = tuple(decode_bound(b) for b in entry["bounds"])
      planned = tuple(int(n) for n in entry["planned"])
      if len(planned) != len(bounds) + 1 or list(bounds) != sorted(bounds):
        raise ValueError(f"split {split!r}: its bounds and planned sizes do not fit")
      files = [sh.path for sh in manifest.splits[split].shards]
      segments = _segments(entry.get("segments"), len(bounds) + 1, len(files))
      if not segments and len(files) != len(planned):
        raise ValueError(f"split {split!r}: {len(files)} shard files for {len(planned)} shards")
      index_names = list(entry.get("indexes") or [])
      if index_names and len(index_names) != len(files):
        raise ValueError(f"split {split!r}: {len(index_names)} indexes for {len(files)} shards")
      for name in files + index_names:
        paths.child(directory, name)  # a name that would leave the directory: refused
      info = manifest.splits[split]
      deltas = _per_file(entry.get("delta"), len(files), bool, "delta")
      splits[split] = PreviousSplit(bounds, planned, segments,
                                    int(info.images) + int(getattr(info, "rejected", 0) or 0),
                                    deltas if segments else ())
      stamps[split] = _per_file(entry.get("stamps"), len(files), str, "stamps")
      digests[split] = _per_file(entry.get("index_digests"), len(files), str, "index_digests")
      rows[split] = _per_file(entry.get("index_rows"), len(files), int, "index_rows")
      shards[split] = tuple(files)
      sizes[split] = tuple(sh.bytes for sh in manifest.splits[split].shards)
      indexes[split] = tuple(entry.get("indexes") or ("",) * len(files))
      images[split] = manifest.splits[split].images
    settings = dict(manifest.config)
    label_map = dict(manifest.label_map)
  except UsageError:
    raise
  except (ValueError, KeyError, TypeError) as e:
    raise UsageError(f"{option} {directory}: its manifest.json has no usable shard plan "
                     f"({e})") from None
  return Previous(directory, splits, shards, indexes, label_map, settings, images, stamps,
                  digests, rows, sizes)


def _per_file(value: Any, files: int, kind: type, name: str) -> Tuple:
  """A shard_plan list with one value of `kind` per shard file, checked; () when absent."""
  if value is None:
    return ()
  if not isinstance(value, list) or len(value) != files or \
      not all(type(v) is kind for v in value):
    raise ValueError(f"its {name} are not one {kind.__name__} per shard file ({files})")
  return tuple(value)


def _segments(value: Any, ranges: int, files: int) -> Tuple[Tuple[int, int], ...]:
  """--append's `segments` of a split (the base ranges each shard file covers), checked:
  one per file, integers with 0 <= first < end <= ranges. () when the output has none."""
  if value is None:
    return ()
  if not isinstance(value, list) or len(value) != files:
    raise ValueError(f"its segments are not one per shard file ({files})")
  out = []
  for item in value:
    if (not isinstance(item, list) or len(item) != 2 or
        not all(type(v) is int for v in item) or not 0 <= item[0] < item[1] <= ranges):
      raise ValueError(f"segment {item!r} is not [first, end] within {ranges} ranges")
    out.append((item[0], item[1]))
  return tuple(out)


def changed_settings(now: Mapping[str, Any], previous: Previous,
                     defaults: Mapping[str, Any] = {}) -> List[str]:
  """The settings of `now` whose value differs from the earlier output's. The caller passes
  the settings that shape records (ConvertConfig.record_settings(): its fields tagged RECORDS,
  and the label map is compared on the workers): any change re-encodes every image. A
  setting the earlier version does not record (made before it existed) had its default."""
  return [k for k in now if now[k] != previous.settings.get(k, defaults.get(k))]


def plan_record(plan: ShardPlan, stats: Sequence[Mapping],
                stamps: Optional[Mapping[str, str]] = None) -> Dict[str, Dict]:
  """The manifest's `shard_plan`: a split the earlier plan gave keeps its bounds and planned
  sizes; a split planned afresh takes its bounds from the first image each shard holds
  (stats' `first`) and its sizes from the plan. `indexes`: each shard's index file, when the
  run wrote them, with `index_digests`; `stamps`: each shard file's stamp by name, when given
  (a version's, recorded once its files are final: publish.seal)."""
  firsts = {(s["split"], s["shard"]): s.get("first") for s in stats if s.get("shard") is not None}
  written = {(s["split"], s["shard"]): s.get("index") for s in stats
             if s.get("shard") is not None}
  record = {}
  for split, split_plan in sorted(plan.splits.items()):
    before = plan.previous.get(split)
    if split_plan.segments:  # --append: the files Finalize kept, in their final order
      files = sorted((s for s in stats if s["split"] == split and s.get("shard") is not None
                      and not s.get("empty")), key=lambda s: s["shard"])
      record[split] = {
          "bounds": [encode_bound(b) for b in before.bounds], "planned": list(before.planned),
          "unit": "records" if split_plan.by_records else "images",
          "segments": [list(s["segment"]) for s in files],
          "delta": [bool(s.get("delta")) for s in files],
          "indexes": [s["index"] for s in files]}
      _add_checks(record[split], files, stamps)
      continue
    if before is not None:
      bounds = [encode_bound(b) for b in before.bounds]
      planned = list(before.planned)
    else:
      bounds = []
      for shard in range(1, split_plan.num_shards):
        first = firsts.get((split, shard))
        if first is None:  # a fresh plan's shards are never empty: a lost shard
          raise RuntimeError(f"shard {shard} of split {split!r} reported no first image")
        bounds.append(encode_bound(tuple(first)))
      planned = sizes_of(split_plan)
    entry = {"bounds": bounds, "planned": planned,
             "unit": "records" if split_plan.by_records else "images"}
    indexes = [written.get((split, shard)) for shard in range(split_plan.num_shards)]
    if all(indexes):
      entry["indexes"] = indexes
    _add_checks(entry, sorted((s for s in stats if s["split"] == split and
                               s.get("shard") is not None), key=lambda s: s["shard"]), stamps)
    record[split] = entry
  return record


def _add_checks(entry: Dict, files: Sequence[Mapping], stamps: Optional[Mapping[str, str]]
                ) -> None:
  """A split's `stamps`, `index_digests` and `index_rows` (one per shard file, in order) when
  all are known: what the next run checks a file and its catalog partition against before it
  uses them (write/shard_writer)."""
  digests = [s.get("index_digest") for s in files]
  if files and all(digests) and entry.get("indexes"):
    entry["index_digests"] = digests
    entry["index_rows"] = [s["images"] + s["rejected"] for s in files]
  if stamps is not None and files and all(stamps.get(s["path"]) for s in files):
    entry["stamps"] = [stamps[s["path"]] for s in files]
