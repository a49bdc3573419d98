"""WriteErrorsFile: the run's error records as one JSON-lines file whose order does not depend
on the runner.

Beam's WriteToText wrote the lines in the order its single shard's group gave them: the same
on the in-process runner every time, another on Prism and on every distributed runner (their
shuffles deliver in their own order), so two runs of one input differed (docs/engines.md).
Sorting them in one place would hold every error of the run on one worker. Here each line
goes to one of PARTS parts by a hash of its text; each part is sorted on one worker and
written to the run's scratch folder; one step then writes the file part after part, streamed.
The order is (part, line): the same on every runner, for any bundling and any retry.

Largest element: one part, about errors / PARTS lines (a run of 100M images with 5% of them
rejected: ~80,000 lines, ~30 MB). The assembly holds one copy buffer.
"""
from __future__ import annotations

import hashlib
import shutil
import uuid
from typing import Iterable, List, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.storage import files, paths
from beam_tfrecord.storage.layout import WORK

NAME = "errors-00000-of-00001.jsonl"  # the name WriteToText gave the one shard
PARTS = 256
_COPY_BYTES = 1 << 20


def part_of(line: str) -> int:
  """The part of one line: the same wherever it is computed."""
  digest = hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=4).digest()
  return int.from_bytes(digest, "big") % PARTS


def sorted_part(lines: Iterable[str]) -> bytes:
  """One part's bytes: its lines sorted, each ended by a newline."""
  return "".join(line + "\n" for line in sorted(lines)).encode("utf-8", "surrogatepass")


def _write_part(element: Tuple[int, Iterable[str]], directory: str) -> str:
  """Write one part under a name of its own (a retried bundle writes another file; the runner
  passes on one attempt's name) and return its path."""
  from apache_beam.io.filesystems import FileSystems
  part, lines = element
  path = paths.child(directory, f"part-{part:05d}-{uuid.uuid4().hex}.jsonl")
  with FileSystems.create(path) as f:
    f.write(sorted_part(lines))
  return path


def _assemble(_, parts: List[str], staging: str) -> Iterable[str]:
  """The errors file from its parts, in part order (a part's number is in its name), written
  under a hidden name and renamed into place; yields its path. With no errors it is empty, as
  WriteToText's was."""
  from apache_beam.io.filesystems import FileSystems
  final = paths.child(staging, NAME)
  partial = paths.child(staging, f".part-{uuid.uuid4().hex}-{NAME}")
  with FileSystems.create(partial) as out:
    for path in sorted(parts, key=lambda p: p.rsplit("/", 1)[-1]):
      with (files.open_local(path, follow=False) if not paths.is_remote(path)
            else files.open_read(path)) as f:
        shutil.copyfileobj(f, out, _COPY_BYTES)
  FileSystems.rename([partial], [final])
  yield final


class WriteErrorsFile(beam.PTransform):
  """PCollection[ErrorRecord] -> PCollection[str]: the path of STAGING/errors-00000-of-00001
  .jsonl, one line per record (ErrorRecord.to_json), ordered by (part, line) whatever the
  runner. Parts go to STAGING/.work/errors (removed with the run's scratch by Finalize)."""

  def __init__(self, staging: str):
    super().__init__()
    self.staging = staging

  def expand(self, errors):
    directory = paths.child(paths.child(self.staging, WORK), "errors")
    parts = (errors
             | "ErrorJson" >> beam.Map(ErrorRecord.to_json)
             | "ByPart" >> beam.Map(lambda line: (part_of(line), line))
             | "GroupParts" >> beam.GroupByKey()
             | "WritePart" >> beam.Map(_write_part, directory))
    return (errors.pipeline
            | "Once" >> beam.Create([None])
            | "Assemble" >> beam.FlatMap(_assemble, beam.pvalue.AsList(parts), self.staging))
