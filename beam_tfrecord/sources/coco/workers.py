"""The DoFns that read COCO files on workers: _ParseSection (one section of one file, for
the distributed join) and _JoinFile (a whole file in one pass, joined through spill files on
the in-process runner), and how a file's bytes reach a parse path (_all_entries)."""
from __future__ import annotations

import itertools
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, InputError
from beam_tfrecord.sources.base import in_batches
from beam_tfrecord.storage import processes
from beam_tfrecord.sources.coco.buffer import (MAX_PARTITIONS, PARTITION_BYTES,
                                               SPILL_BUFFER_BYTES, SPILL_PARTITIONS,
                                               _JoinBuffer)
from beam_tfrecord.sources.coco.entries import (annotation_extras, annotation_fields,
                                                category_keypoints, parse_category,
                                                parse_image)
from beam_tfrecord.sources.coco import join_pool
from beam_tfrecord.sources.coco.join import category_zero, file_layout, tagged
from beam_tfrecord.sources.coco.scan import _NotStreamable, fast_sections
from beam_tfrecord.sources.coco.stream import SECTIONS, missing_section, stream_sections

# Annotations are combined per image before the join, so that it sees one element per image
# rather than one per object (4.3 per image in the benchmark); the buffer is flushed at this
# many objects to bound memory on files like train2017 (860k annotations).
OBJECT_BUFFER = 200_000


_NOTHING: Tuple = ()

_PARSERS = {"images": parse_image, "annotations": annotation_fields,
            "categories": parse_category}


class _ParseSection(beam.DoFn):
  """(split, json_uri, image_root, section) -> tagged small records.

  images: ((uri, image_id), (split, image_root, file_name, width, height));
  objects: ((uri, image_id), ((index, category_id, (x0, y0, x1, y1), is_crowd, area, id,
  segmentation, keypoints), ...)), several per image only when the buffer was flushed between
  its annotations (id, segmentation and keypoints from annotation_extras);
  categories: ((uri, category_id), name);
  keypoints: ((uri, category_id), (name, point names, skeleton)) of a category with keypoints;
  zero, without --label-map (drop_background), for _zero_verdict: (uri, ('used', index)) for
  the first annotation with category_id 0, (uri, ('defined', index, name)) for a category 0.
  """

  flush_objects = True  # _JoinFile keeps every object until the file is read

  def __init__(self, allow_absolute: bool, drop_background: bool = False,
               include_masks: bool = False):
    self.allow_absolute = allow_absolute
    self.drop_background = drop_background
    self.include_masks = include_masks

  def _keep(self, buffer, image_id: int, chunk: Tuple) -> None:
    buffer.setdefault(image_id, []).append(chunk)

  def _flush(self, uri, buffer):
    for image_id, objects in buffer.items():
      yield beam.pvalue.TaggedOutput("objects", ((uri, image_id), tuple(objects)))
    buffer.clear()

  def _image(self, buffer, uri, split, image_root, image_id, file_name, width, height):
    """An image entry's outputs: a tagged small record (the distributed join's)."""
    return [((uri, image_id), (split, image_root, file_name, width, height))]

  def _emit(self, uri, split, image_root, section, index, record, buffer) -> Sequence[Any]:
    """One entry's outputs, in a list (none, most annotations: they wait in the buffer). Not a
    generator: one per entry cost ~1 us an image at a million small images."""
    parse = _PARSERS[section]
    try:
      if isinstance(record, InputError):  # an entry the parser rejected (too deep)
        raise record
      parsed = parse(record)
    except InputError as e:  # this entry alone: an image, an object, or a category's name
      level = {"images": "image", "annotations": "object"}.get(section, "file")
      return [beam.pvalue.TaggedOutput("errors", e.record(
          f"{uri}#{section}[{index}]", _best_key(uri, record), level=level))]
    if section == "images":
      return self._image(buffer, uri, split, image_root, *parsed)
    if section == "annotations":
      # the index keeps the file's object order through the shuffle; the box travels as a
      # plain tuple (a dataclass would be pickled); extras: (id, segmentation)
      image_id, category_id, box, is_crowd, area = parsed
      if category_id == 0 and self.drop_background and self._zero_used is None:
        self._zero_used = index  # the run fails (category_zero)
      try:
        extras = annotation_extras(record, self.include_masks)
      except InputError as e:  # its keypoints are not a list: this object alone
        return [beam.pvalue.TaggedOutput("errors", e.record(
            f"{uri}#{section}[{index}]", _best_key(uri, record), level="object"))]
      self._keep(buffer, image_id, (index, category_id, box, is_crowd, area, *extras))
      self._buffered += 1
      if self.flush_objects and self._buffered >= OBJECT_BUFFER:
        self._buffered = 0
        return list(self._flush(uri, buffer))
      return _NOTHING
    if parsed[0] == 0 and self.drop_background:
      self._zero_defined.append((index, parsed[1]))  # dropped: warned of once 0 is known unused
      return _NOTHING
    out: List[Any] = [beam.pvalue.TaggedOutput("categories", ((uri, parsed[0]), parsed[1]))]
    try:
      points = category_keypoints(record)
    except InputError as e:  # the category stays, without keypoints
      out.append(beam.pvalue.TaggedOutput("errors", e.record(f"{uri}#{section}[{index}]", uri,
                                                             level="file")))
      return out
    if points is not None:
      names, edges, warning = points
      if warning:  # the skeleton alone is dropped: it only says how to draw the points
        out.append(beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=f"{uri}#{section}[{index}]", stage="parse", reason="bad_skeleton",
            key=uri, level="warning", message=warning)))
      out.append(beam.pvalue.TaggedOutput("keypoints", ((uri, parsed[0]),
                                                        (parsed[1], names, edges))))
    return out

  def process(self, task):
    split, uri, image_root, section = task
    buffer: Dict[int, List[Tuple]] = {}
    self._buffered = 0
    self._zero_used, self._zero_defined = None, []
    yield from self._parse(uri, split, image_root, section, buffer)
    yield from self._flush(uri, buffer)
    # the annotations and the categories are read by different tasks: _zero_verdict meets them
    if self._zero_used is not None:
      yield beam.pvalue.TaggedOutput("zero", (uri, ("used", self._zero_used)))
    for index, name in self._zero_defined:
      yield beam.pvalue.TaggedOutput("zero", (uri, ("defined", index, name)))

  def _parse(self, uri, split, image_root, section, buffer):
    from apache_beam.io.filesystems import FileSystems
    done = 0
    where: Dict[str, Any] = {"key": None}
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        found: set = set()
        for _, record in stream_sections(f, (section,), found=found, where=where):
          yield from self._emit(uri, split, image_root, section, done, record, buffer)
          done += 1
      error = None if section in found else missing_section(section)
      if error:
        yield beam.pvalue.TaggedOutput("errors", error.record(uri, uri, level="file"))
      return
    except InputError as e:  # this section is no array; or the file is no object, which
      # every task meets: the images task says so
      if section == "images" or f"`{section}`" in e.message:
        yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # ijson's syntax errors, an unreadable file
      streaming_error = _first_line(e)
    # every section's task meets a broken file: the one whose section it broke in says so
    # (the images task when it broke elsewhere), once; the others keep what they read
    reports = section == (where["key"] if where["key"] in SECTIONS else "images")
    rest = _rest_of(uri, {section: done}, where["key"], streaming_error)
    if isinstance(rest, ErrorRecord):
      if reports:
        yield beam.pvalue.TaggedOutput("errors", rest)
      return
    for index, record in enumerate(rest[section], start=done):
      yield from self._emit(uri, split, image_root, section, index, record, buffer)


def _rest_of(uri: str, done: Dict[str, int], broke_in: Optional[str], streaming_error: str
             ) -> Union[ErrorRecord, Dict[str, List[Any]]]:
  """After a streaming error: each section's entries from done[section] on, read by Python's
  json, which accepts what ijson refuses (NaN, Infinity, 1e400) by loading the whole file
  once; or, when the file is truly broken (cut short, not JSON), the one malformed_json
  record that says where it broke and that the rest of the file was not read."""
  import json

  from apache_beam.io.filesystems import FileSystems
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      doc = json.load(f)
  except Exception as e:  # the same words from either join (the reporting task knows
    # the count of its own section only)
    where = (f"after {done[broke_in]} entries of `{broke_in}`" if broke_in in done else
             f"inside `{broke_in}`" if broke_in else "outside its arrays")
    return ErrorRecord(
        source=uri, stage="parse", reason="malformed_json", key=uri, level="file",
        message=f"the file breaks {where} ({streaming_error}; {_first_line(e)}); the rest "
                "of the file was not read")
  rest = {}
  for section, start in done.items():
    entries = doc.get(section, []) if isinstance(doc, dict) else None
    rest[section] = entries[start:] if isinstance(entries, list) else []
  return rest


def _all_entries(uri: str, found: set, bad: List[Tuple[str, InputError]],
                 where: Dict[str, Any]) -> Iterator[Tuple[str, Any]]:
  """stream_sections(file, SECTIONS, found, bad) of the file at `uri`, read by fast_sections.
  Where fast_sections cannot be sure to read what ijson reads, the file is streamed again
  with ijson (stream_sections), from the start, and the entries not given yet follow, with
  ijson's own errors."""
  from apache_beam.io.filesystems import FileSystems
  given: Dict[str, int] = {}
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    try:
      for section, entry in fast_sections(f, SECTIONS, found=found, bad=bad):
        given[section] = given.get(section, 0) + 1
        yield section, entry
      return
    except _NotStreamable:
      pass  # what ijson would stop at, or not JSON: ijson decides, from the start
  found.clear()
  del bad[:]
  seen: Dict[str, int] = {}
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    for section, entry in stream_sections(f, SECTIONS, found=found, bad=bad, where=where):
      seen[section] = seen.get(section, 0) + 1
      if seen[section] > given.get(section, 0):  # the entries not given already
        yield section, entry


class _JoinFile(_ParseSection):
  """(split, json_uri, image_root) -> lists of at most BATCH_IMAGES ImageAnnotations; tagged:
  categories ((uri, id), name) and errors, as ReadCoco's distributed path gives them, and
  layouts: (uri, its KeypointLayout or None), once.

  The whole file in one pass over its bytes, joined here: one element per image from the
  start, where the distributed path parses the file once per section and meets images and
  their objects in a CoGroupByKey. COCO's categories come last, so images and objects wait in
  a _JoinBuffer, spilled to local disk by partition of image id past `buffer_bytes`, and are
  joined one partition at a time: memory is bounded by the buffer plus one partition, not by
  the file. Used for every file on the in-process runner (one stage at a time, one thread).
  Images come out by partition, not in the file's order.
  """

  flush_objects = False

  def __init__(self, allow_absolute: bool, follow_symlinks: bool = False,
               drop_background: bool = False, include_masks: bool = False,
               partitions: int = SPILL_PARTITIONS, buffer_bytes: int = SPILL_BUFFER_BYTES,
               processes: int = 0, pool_min_bytes: int = join_pool.MIN_FILE_BYTES):
    super().__init__(allow_absolute, drop_background, include_masks)
    self.follow_symlinks = follow_symlinks
    self.partitions, self.buffer_bytes = partitions, buffer_bytes
    # worker processes that join a file of at least pool_min_bytes (join_pool); 0: none
    self.processes, self.pool_min_bytes = processes, pool_min_bytes

  def _keep(self, buffer, image_id: int, chunk: Tuple) -> None:
    buffer.add_object(image_id, chunk)

  def _image(self, buffer, uri, split, image_root, image_id, file_name, width, height):
    buffer.add_image(image_id, file_name, width, height)
    return _NOTHING

  def _partitions(self, size: int) -> int:
    return min(MAX_PARTITIONS, max(self.partitions, -(-size // PARTITION_BYTES)))

  def process(self, task):
    split, uri, image_root = task
    try:
      from apache_beam.io.filesystems import FileSystems
      size = FileSystems.get_filesystem(uri).size(uri)
    except Exception:  # missing or unreadable: parsing reports it
      size = 0
    buffer = _JoinBuffer(self._partitions(size), self.buffer_bytes)
    names: Dict[Tuple[str, int], List[str]] = {}
    points: List[Tuple] = []  # the categories' keypoint definitions
    self._buffered = 0
    self._zero_used, self._zero_defined = None, []
    # started now: the worker's imports overlap the scan, on the core the scan leaves idle
    pool = (processes.Pool(self.processes, "beam_tfrecord.sources.coco.join_pool:join_partition",
                           eager=True, what=lambda t: f"the join of {t.uri}")
            if self.processes and size >= self.pool_min_bytes else None)
    try:
      for out in self._parse_all(uri, split, image_root, buffer):  # images: in the buffer
        if out.tag == "keypoints":
          points.append(out.value)
          continue
        if out.tag == "categories":
          names.setdefault(out.value[0], []).append(out.value[1])
        yield out
      for error in category_zero(uri, self._zero_used, self._zero_defined):
        yield beam.pvalue.TaggedOutput("errors", error)
      categories = {key: min(found) for key, found in names.items()}  # as PickCategory
      layout = file_layout(points)
      yield beam.pvalue.TaggedOutput("layouts", (uri, layout))
      layouts = {uri: layout} if layout is not None else None
      if pool is not None:
        spilled = buffer.spilled()
        yield from tagged(join_pool.in_processes(pool, (join_pool.JoinTask(
            *spilled, p, uri, split, image_root, categories, self.allow_absolute,
            self.follow_symlinks, layouts) for p in range(buffer.partitions))))
        return
      yield from in_batches(tagged(itertools.chain.from_iterable(join_pool.joined(
          *buffer.partition(p), uri, split, image_root, categories, self.allow_absolute,
          self.follow_symlinks, layouts) for p in range(buffer.partitions))))
    finally:
      if pool is not None:
        pool.shutdown()
      buffer.close()

  def _parse_all(self, uri, split, image_root, buffer):
    """_parse for every section in one pass; after a streaming error, each section goes on
    from where it was, as the per-section tasks do."""
    done = dict.fromkeys(SECTIONS, 0)
    found: set = set()
    bad: List[Tuple[str, InputError]] = []
    where: Dict[str, Any] = {"key": None}
    streaming_error = None
    try:
      for section, record in _all_entries(uri, found, bad, where):
        out = self._emit(uri, split, image_root, section, done[section], record, buffer)
        if out:
          yield from out
        done[section] += 1
    except InputError as e:  # not an object: said once
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # ijson's syntax errors, an unreadable file
      streaming_error = _first_line(e)
    for _, error in bad:  # a section that is not an array
      yield beam.pvalue.TaggedOutput("errors", error.record(uri, uri, level="file"))
    if streaming_error is not None:
      going = {s: n for s, n in done.items() if s not in dict(bad)}
      rest = _rest_of(uri, going, where["key"], streaming_error)
      if isinstance(rest, ErrorRecord):
        yield beam.pvalue.TaggedOutput("errors", rest)
        return
      for section, entries in rest.items():
        for index, record in enumerate(entries, start=done[section]):
          yield from self._emit(uri, split, image_root, section, index, record, buffer)
      return
    for section in SECTIONS:
      error = None if section in found else missing_section(section)
      if error:
        yield beam.pvalue.TaggedOutput("errors", error.record(uri, uri, level="file"))


def _first_line(e: Exception) -> str:
  """'Type: message' of an exception, its first line (ijson draws where it broke below)."""
  return f"{type(e).__name__}: " + (str(e).strip().splitlines() or [""])[0]


def _best_key(uri: str, entry: Any) -> str:
  """The key of an error about one entry: an image entry's file_name when it has one, else the
  annotation file (error records never go without a key)."""
  name = entry.get("file_name") if isinstance(entry, dict) else None
  return name if isinstance(name, str) and name else uri
