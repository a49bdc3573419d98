"""The strict parse path: the entries of COCO's top-level arrays from ijson's flat event
stream, built in Python, with a depth limit. What ijson accepts and how it fails is what
COCO reads: the distributed join's per-section tasks read with it, and the fast path
(scan.py) hands it every file where the two could differ. Beam-free.

Kept, though ijson.items (C backend) reads one section 1.6-2.2x faster (benchmarks/
coco_parse.py, 50,000 images: 0.91 against 0.53 s on integers, 1.59 against 0.73 s on
full-precision floats), because it stays in constant memory on any nesting: 15 kB of '['
cost ijson.items 538 MB (its prefixes grow with the square of the depth: 3,000 -> 22 MB,
6,000 -> 86 MB) and these events 2 MB (2026-11-25, tracemalloc).
"""
from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence, Tuple

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import depth

SECTIONS = ("images", "annotations", "categories")
MAX_DEPTH = depth.MAX_DEPTH  # COCO nests 5 deep; deep nesting costs the parsers (depth.py)


def stream_section(fileobj, section: str, max_depth: int = MAX_DEPTH) -> Iterator[Any]:
  """Yield the entries of one top-level array of a COCO JSON without loading the file.

  Built on ijson's flat event stream (not ijson.items, whose prefix bookkeeping grows with the
  square of the nesting depth: 30 kB of '[' took 2.2 GB), with a depth limit: an entry nesting
  deeper is given as InputError too_deep (stream_sections). Raises InputError when the document is not an object, the section is not an array, or when
  `images`/`categories` are missing (`annotations` may be: COCO test-set files lack it).
  """
  found: set = set()
  for _, entry in stream_sections(fileobj, (section,), max_depth, found):
    yield entry
  error = None if section in found else missing_section(section)
  if error:
    raise error


def stream_sections(fileobj, sections: Sequence[str], max_depth: int = MAX_DEPTH,
                    found: Optional[set] = None,
                    bad: Optional[List[Tuple[str, InputError]]] = None,
                    where: Optional[dict] = None) -> Iterator[Tuple[str, Any]]:
  """(section, entry) for the entries of several top-level arrays, in one pass over the file
  (as stream_section). With `found`, the sections seen are added to it instead of raising for
  a missing one; with `bad`, a section that is not an array is skipped and its error added
  there, so that the other sections are still read. `where['key']` is kept as the top-level
  key whose value is being read (None between them): where a stream that breaks broke.

  An entry nesting deeper than max_depth is not built: its events are skipped (constant
  memory) and the entry is given as InputError too_deep, so that it alone is rejected. A value
  outside the sections is never built, so its depth does not matter."""
  import ijson
  wanted = set(sections)
  found_sections: set = found if found is not None else set()
  level = 0             # open containers
  key = None            # last key of the top-level object
  section = None        # the wanted section whose array we are in
  stack: List[Any] = []  # containers of the entry being built
  keys: List[Optional[str]] = []
  skipping = False      # inside an over-deep entry (level 3 and below)

  def add(value):
    if isinstance(stack[-1], dict):
      stack[-1][keys[-1]] = value
    else:
      stack[-1].append(value)

  for event, value in ijson.basic_parse(fileobj, use_float=True):
    if event in ("start_map", "start_array"):
      level += 1
      if skipping:
        continue
      if level == 1:
        if event != "start_map":
          raise InputError("parse", "wrong_type", "a COCO file must be a JSON object")
        continue
      if level == 2:
        if where is not None:
          where["key"] = key
        if key in wanted:
          found_sections.add(key)
          if event != "start_array":
            error = InputError("parse", "wrong_type", f"`{key}` must be an array")
            if bad is None:
              raise error
            bad.append((key, error))
            continue
          section = key
        continue
      if section is not None:
        if level > max_depth:  # the entry (level 3) is skipped to its end
          skipping = True
          stack.clear()
          keys.clear()
          continue
        stack.append({} if event == "start_map" else [])
        keys.append(None)
      continue
    if event in ("end_map", "end_array"):
      level -= 1
      if skipping:
        if level == 2:  # the over-deep entry ended
          skipping = False
          yield section, depth.too_deep(max_depth)
        continue
      if level == 1:
        section = None
        if where is not None:
          where["key"] = None
      elif section is not None and stack:
        done = stack.pop()
        keys.pop()
        if stack:
          add(done)
        else:
          yield section, done
      continue
    if skipping:
      continue
    if event == "map_key":
      if level == 1:
        key = value
      elif section is not None and stack:
        keys[-1] = value
      continue
    if section is not None:  # a scalar
      if stack:
        add(value)
      else:
        yield section, value  # a scalar entry: the parse function reports its wrong type
  for name in sections:
    if found is None and name not in found_sections:
      raise missing_section(name)


def missing_section(name: str) -> Optional[InputError]:
  """The error for a section the file lacks (None: `annotations` may be missing, as in COCO
  test-set files)."""
  if name in ("images", "categories"):
    return InputError("parse", "missing_field", f"the file has no `{name}` array")
  return None
