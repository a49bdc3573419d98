"""write/shard_index.py: an index line is the entry's fields as sorted, compact JSON, and
reads back as the same entry."""
from __future__ import annotations

import dataclasses
import json

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.write import shard_index


def test_line_is_the_entrys_fields_as_sorted_json_and_parses_back():
  errors = shard_index.errors_of([ErrorRecord("a.json", "validate", "size_mismatch",
                                              "says 1x2, \u00e9 \"q\"", "k", "warning")])
  entry = shard_index.Entry(key="k\u00e9.jpg", uri="/d/k\u00e9.jpg", stamp="1:2:3:4",
                            digest="ab" * 16, offset=7, length=99, records=1, objects=2,
                            clipped=1, reoriented=1, labels=("cat", "dog"), errors=errors,
                            rejected=False, sha="cd" * 16, content="ef" * 32)
  fields = dataclasses.asdict(entry)
  fields.update(labels=list(entry.labels), errors=[dict(e) for e in entry.errors])
  assert entry.line() == json.dumps(fields, sort_keys=True, separators=(",", ":"),
                                    ensure_ascii=False).encode("utf-8") + b"\n"
  assert shard_index.parse(entry.line() + entry.line().replace(b'"offset":7', b'"offset":106')
                           ) == [entry, dataclasses.replace(entry, offset=106)]
