"""`beam-tfrecord verify`: check an output against its manifest, one line per problem.

Checks, in order: no interrupted replacement; a manifest with status ok; every listed file
present, as a regular file (a link or a directory there is named and never read); each shard's byte count, record framing (CRCs) and record count as the manifest says,
every record parsed with TensorFlow through the manifest's feature spec; no record file the
manifest does not list (named like TFRecords, or by the run's --shard-name-template);
label_map.pbtxt equal to the manifest's label map.

A versioned output's DEST (convert --append) is checked at the version its LATEST names,
read once; the verdict names it (`verify: DEST -> versions/<V>: ...`). A damaged LATEST is
DamagedVersions (one line and exit 2 from the command). A published version is never
changed, so `--repair` on DEST repairs nothing unless that version has a swap journal.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.records import tfrecord
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.storage import files, paths, record_files, versions

RECORD_FILE = re.compile(r"(\.tfrec|\.tfrecord|\.tfrecords|\.array_record)$|-\d{5}-of-\d{5}")


def template_pattern(template: Optional[str]) -> Optional["re.Pattern"]:
  """A regex matching the names --shard-name-template gives (each field: any text), so
  that a stray file named like the run's shards is found whatever the template."""
  import string
  if not template:
    return None
  try:
    parts = [re.escape(literal) + (".+" if field is not None else "")
             for literal, field, _, _ in string.Formatter().parse(template)]
  except ValueError:
    return None
  return re.compile("^" + "".join(parts) + "$")


def locate_corruption(uri: str) -> Tuple[int, str]:
  """(index of the first bad record, why) by walking the TFRecord framing with CRC checks."""
  index = 0
  with files.open_read(uri) as f:
    while True:
      try:
        if tfrecord.read_record(f) is None:
          return -1, ""
      except ValueError as e:
        text = str(e)
        why = ("CRC mismatch" if "data mask" in text else
               "length CRC mismatch" if "length mask" in text else "truncated record")
        return index, why
      index += 1


def _tf_message(error) -> str:
  """TensorFlow's message without the op's wrapping ({{function_node ...}} and [Op:...])."""
  import re
  text = " ".join(str(error.message).split())
  return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:[^\]]*\].*$", "", text)[:200]


def _check_array_record(uri: str, name: str, spec: Dict, expected: Optional[int]
                        ) -> Tuple[int, List[str]]:
  """_check_shard of an ArrayRecord shard: every record read (Riegeli checks its hashes)
  and parsed with TensorFlow, a batch at a time."""
  import tensorflow as tf
  problems: List[str] = []
  count = 0

  def parse(batch: List[bytes]) -> bool:
    try:
      parsed = tf.io.parse_example(batch, spec)
    except tf.errors.InvalidArgumentError:
      for i, record in enumerate(batch):
        try:
          tf.io.parse_single_example(record, spec)
        except tf.errors.InvalidArgumentError as e:
          first = str(e).strip().splitlines()[0][:200]
          problems.append(f"{name}: record {count + i} does not parse with the manifest's "
                          f"features ({first})")
          return False
      return False
    for key in ("image/width", "width"):
      if key in parsed:
        for i, value in enumerate(parsed[key].numpy().tolist()):
          if value <= 0:
            problems.append(f"{name}: record {count + i} has {key} {value}")
    return True

  batch: List[bytes] = []
  try:
    for record in record_files.read_records(uri, record_files.ARRAY_RECORD):
      batch.append(record)
      if len(batch) == record_files.READ_BATCH:
        if not parse(batch):
          return count, problems
        count, batch = count + len(batch), []
    if batch and not parse(batch):
      return count, problems
    count += len(batch)
  except (ValueError, OSError) as e:
    problems.append(f"{name}: corrupt after record {count} ({e})")
    return count, problems
  if expected is not None and count != expected:
    problems.append(f"{name}: manifest says {expected} records, the file holds {count}")
  return count, problems


def _check_shard(uri: str, name: str, spec: Dict, expected: Optional[int],
                 file_format: str = record_files.TFRECORD) -> Tuple[int, List[str]]:
  """(records parsed, problems) of one shard file."""
  if file_format == record_files.ARRAY_RECORD:
    return _check_array_record(uri, name, spec, expected)
  import tensorflow as tf
  problems: List[str] = []
  count = 0
  parse = lambda r: tf.io.parse_single_example(r, spec)  # noqa: E731
  try:
    for record in tf.data.TFRecordDataset([uri]).map(parse):
      count += 1
      for key in ("image/width", "width"):
        if key in record and int(record[key]) <= 0:
          problems.append(f"{name}: record {count - 1} has {key} {int(record[key])}")
  except tf.errors.DataLossError:
    index, why = locate_corruption(uri)
    problems.append(f"{name}: corrupt record {max(index, count)} ({why or 'unreadable'})")
    return count, problems
  except tf.errors.InvalidArgumentError as e:
    first = str(e).strip().splitlines()[0][:200]
    problems.append(f"{name}: record {count} does not parse with the manifest's features "
                    f"({first})")
    return count, problems
  except tf.errors.OpError as e:  # a directory, a lost connection: a problem, not a traceback
    problems.append(f"{name}: cannot be read with TensorFlow after record {count} "
                    f"({_tf_message(e)})")
    return count, problems
  if expected is not None and count != expected:
    problems.append(f"{name}: manifest says {expected} records, the file holds {count}")
  return count, problems


def repair_output(output: str, break_lock: bool = False) -> Optional[str]:
  """Complete an interrupted replacement with the output's lock held, as a run would: never
  under a live run's feet, and a dead run's lock is taken over and released (not left
  behind). What was done, or None. Raises lock.OutputLocked / lock.LockNotWritten."""
  import uuid

  from beam_tfrecord.finalize import lock as locks
  if not files.is_dir(output):
    return None  # nothing to repair, nowhere to lock
  with locks.OutputLock(output, f"verify-{uuid.uuid4().hex}", break_lock):
    return outputs.recover(output)


def check(output: str, repair: bool = False, break_lock: bool = False
          ) -> Tuple[int, List[str], List[str]]:
  """(records parsed, problems, notes). No problems means the output is sound. A versioned
  output's DEST is checked at the version LATEST names (DamagedVersions when LATEST is)."""
  directory, number = versions.locate(output)
  return _check(directory, number, output, repair, break_lock)


def _check(output: str, number: Optional[int], dest: str, repair: bool, break_lock: bool
           ) -> Tuple[int, List[str], List[str]]:
  """check() of `output`, a directory already resolved: `number` is the version LATEST in
  `dest` named, None when `output` was given as it is."""
  from beam_tfrecord.readback import reader
  notes: List[str] = []
  if repair:
    if number is not None and outputs.pending_swap(output) is None:
      notes.append(f"{dest} is a versioned output: nothing to repair (a published version "
                   "is never changed)")
    else:
      done = repair_output(output, break_lock)
      if done:
        notes.append(done)
  if outputs.journal_exists(output):
    refusal = outputs.journal_refusal(output)  # a journal no repair takes: what to remove
    if refusal:
      return 0, [f"{output}: a replacement is pending that cannot be completed: {refusal}"], \
          notes
    journal = outputs.pending_swap(output)
    return 0, [f"{output}: a run ({journal.get('run_id')}) was interrupted while replacing "
               "the output; `beam-tfrecord verify --repair` completes it"], notes
  odd = outputs.not_a_plain_file(paths.join(output, outputs.MANIFEST))
  if odd:  # read through a link, it would be another output's verdict
    return 0, [f"{outputs.MANIFEST}: {odd}, not a manifest this tool wrote (not read)"], notes
  try:
    raw = outputs.read_json(paths.join(output, outputs.MANIFEST))
  except Exception as e:
    failed = [n for n in outputs.entries(output) if n.startswith(outputs.RUN_PREFIX)]
    hint = f"; failed run reports: {', '.join(failed)}" if failed else ""
    if number is None and versions.is_versioned(output):
      hint += f"; it has {versions.VERSIONS}/ but no {versions.LATEST}: no version is published"
    return 0, [f"{output}: no readable {outputs.MANIFEST} ({type(e).__name__}){hint}"], notes
  problems: List[str] = []
  status = raw.get("status") if isinstance(raw, dict) else None
  if status != "ok":
    problems.append(f"{outputs.MANIFEST}: status is {status!r}, not 'ok'")
  try:
    listed = set(outputs.files_of(raw))
    manifest = Manifest.of(raw)
  except (paths.UnsafeName, TypeError, AttributeError, KeyError) as e:
    # names outside the output: nothing to check there, and nothing --overwrite would replace
    return 0, problems + [f"{outputs.MANIFEST}: does not list its files as plain names inside "
                          f"the output ({type(e).__name__}: {e})"], notes
  except ValueError as e:  # a field of the wrong type (records/manifest.py names it)
    return 0, problems + [str(e)], notes
  present = set(outputs.entries(output))
  for name in sorted(listed - present):
    problems.append(f"{name}: listed in the manifest, missing")
  # a listed name that is now a link (to a directory, to another file) or a directory is not
  # what the run wrote: named, and never read through (issue 40, item 6: verify said OK)
  odd = {n: what for n in sorted(listed & present)
         for what in [outputs.not_a_plain_file(paths.child(output, n))] if what}
  for name, what in odd.items():
    problems.append(f"{name}: {what}, not the file the manifest lists (not read)")
  present -= set(odd)
  ours = template_pattern(manifest.setting("shard_name_template"))
  for name in sorted(present - listed):
    if not name.startswith(outputs.OWN_PREFIX) and (
        RECORD_FILE.search(name) or (ours is not None and ours.match(name))):
      problems.append(f"{name}: stray record file, not in the manifest")
  spec = reader.feature_description(manifest)
  file_format = record_files.file_format_of(manifest)
  total = 0
  for split, entry in manifest.splits.items():
    listed_examples = [s.examples for s in entry.shards]
    if None not in listed_examples and sum(listed_examples) != entry.examples:
      problems.append(f"{split}: manifest says {entry.examples} examples, its shards "
                      f"{sum(listed_examples)}")
    for shard in entry.shards:
      name = shard.path
      if name not in present:  # listing names only: so never a path outside the output
        if name not in listed and name not in odd:
          problems.append(f"{name!r}: a shard of split {split} the manifest's files omit")
        continue
      uri = paths.child(output, name)
      size = paths.size_of(uri)
      if size != shard.bytes:
        problems.append(f"{name}: manifest says {shard.bytes} bytes, the file has {size}")
      count, found = _check_shard(uri, name, spec, shard.examples, file_format)
      total += count
      problems.extend(found)
      if manifest.setting("index_files"):
        problems.extend(check_index_file(output, name, present, odd))
  problems.extend(check_indexes(output, manifest, present, skip=odd,
                                file_format=file_format))
  if outputs.LABEL_MAP in listed and outputs.LABEL_MAP in present:
    try:
      from beam_tfrecord import \
          schemas  # classification numbers classes from 0
      on_disk = files.read_label_map(paths.join(output, outputs.LABEL_MAP),
                                schemas.first_id_of(manifest.schema))
      if on_disk != manifest.label_map:
        problems.append(f"{outputs.LABEL_MAP}: differs from the manifest's label map")
    except ValueError as e:
      problems.append(f"{outputs.LABEL_MAP}: {e}")
  return total, problems, notes


def check_index_file(output: str, shard: str, present, skip=()) -> List[str]:
  """--index-files: the shard's index, present and matching its shard (record_files)."""
  name = record_files.index_name(shard)
  if name in skip:
    return []
  if name not in present:
    return [f"{name}: the index file of {shard} is missing"]
  problem = record_files.check_index(paths.child(output, shard), paths.child(output, name))
  return [f"{name}: {problem}"] if problem else []


def check_indexes(output: str, manifest, present, skip=(),
                  file_format: str = record_files.TFRECORD) -> List[str]:
  """Each catalog partition (--append) against the manifest and its shard: the digest and
  row count the manifest lists, entries that cover the file end to end, and each image's
  byte range holding as many whole framed records as it lists, with the digest it lists. The
  next run trusts none of this (it checks every range it copies); verify says where a
  partition went wrong. Names in `skip` (links, directories: reported already) are not
  read."""
  from beam_tfrecord.storage import catalog
  problems: List[str] = []
  for split, plan in (manifest.shard_plan or {}).items():
    names = plan.get("indexes") if isinstance(plan, dict) else None
    shards = manifest.splits[split].shards if split in manifest.splits else ()
    if not names or len(names) != len(shards):
      continue
    digests = plan.get("index_digests") or [""] * len(names)
    rows = plan.get("index_rows") or [-1] * len(names)
    for shard, name, digest, count in zip(shards, names, digests, rows):
      if name in skip or shard.path in skip:  # named already, and not read through
        continue
      if name not in present or shard.path not in present:
        problems.append(f"{name}: the index of {shard.path} is missing")
        continue
      entries, found = catalog.read_checked(paths.child(output, name))
      if entries is None:
        problems.append(f"{name}: not a catalog partition this tool writes")
        continue
      if digest and found != digest or count >= 0 and len(entries) != count:
        problems.append(f"{name}: not the partition the manifest lists (digest or rows)")
        continue
      end = 0
      unit = "byte" if file_format == record_files.TFRECORD else "record"
      try:
        with record_files.EarlierShard(paths.child(output, shard.path), file_format) as f:
          for e in entries:
            if e.offset != end:
              problems.append(f"{name}: {e.key} begins at {unit} {e.offset}, not {end}")
              break
            if catalog.checked_range(f, e) is None:
              problems.append(f"{name}: the records of {e.key} are not what it lists")
              break
            end += e.length
          else:
            if end != f.extent:
              problems.append(f"{name}: lists {end} {unit}s of {shard.path}'s {f.extent}")
      except (OSError, ValueError) as e:
        problems.append(f"{name}: {shard.path} cannot be read ({e})")
  return problems


def run(output: str, repair: bool = False, break_lock: bool = False) -> int:
  """Print one line per problem and a verdict; 0 when sound, 1 otherwise (also when --repair
  cannot write the output's lock: one line)."""
  import sys

  from beam_tfrecord.finalize import lock as locks
  try:
    directory, number = versions.locate(output)
  except versions.DamagedVersions as e:  # one line, exit 2 (cli.main prints UsageError so)
    from beam_tfrecord.errors import UsageError
    raise UsageError(str(e)) from None
  try:
    total, problems, notes = _check(directory, number, output, repair, break_lock)
  except locks.LockNotWritten as e:
    print(f"beam-tfrecord: {output}: {e}", file=sys.stderr)
    return 1
  for note in notes:
    print(f"verify: {note}")
  for problem in problems:
    print(problem)
  read = f"{output} -> {versions.label(number)}: " if number is not None else ""
  print(f"verify: {read}{total} examples parsed with TensorFlow: "
        f"{'OK' if not problems else 'FAILED'}")
  return 0 if not problems else 1
