"""The output directory: who owns what in it, and how a finished run replaces the last one.

Never destroy, never mix, never pretend:
- A run writes everything (shards, error report, label map, manifest) into its own run
  directory, `OUT/.beam-tfrecord-run-<id>/`. Only a run that succeeded (status ok, at least
  one example) replaces the output; a failed or empty one leaves the previous output as it
  was, and its run directory stays behind as the report of what went wrong.
- The replacement (`commit`) is journaled: `OUT/.beam-tfrecord-swap.json` names the run
  directory and the files; the old manifest goes first (readers then see no output rather
  than a mix), the old files next, the new files are moved in, and the new manifest.json
  last. A kill anywhere in between leaves the journal, and `recover` rolls the swap forward
  (the run directory still holds the complete new output).
- The tool owns only what a manifest lists plus its own `.beam-tfrecord-*` entries. Anything
  else in the output directory is foreign: a run refuses to start rather than delete it. So
  is a listed name that is now a link, a directory or a special file (the tool writes only
  regular files), and locally each deletion is one unlink of a name seen to be a regular file.
"""
from __future__ import annotations

import contextlib
import json
import os
import posixpath
import stat
from typing import Dict, Iterable, List, Optional, Sequence, Union

from beam_tfrecord.errors import UsageError, named_few
from beam_tfrecord.records.manifest import Leakage, Manifest
from beam_tfrecord.storage import files, paths, record_files
from beam_tfrecord.storage.layout import (JOURNAL, LABEL_MAP, LABELS_TXT, LOCK, MANIFEST,  # noqa: F401
                                          OWN_PREFIX, RUN_PREFIX, WORK, kill_point,
                                          local_work_dir, run_dir)

class OutputNotEmpty(UsageError):
  pass


def remove_work(run_directory: str, run_id: str) -> None:
  """Delete a run's scratch (plan/transform's spill files and sorted runs) once its shards are
  written: in the run directory, and in the temporary folder a local runner used for it."""
  _delete_tree(paths.child(run_directory, WORK))
  if paths.is_remote(run_directory):
    _delete_tree(local_work_dir(run_id))


def _basename(uri: str) -> str:
  return posixpath.basename(uri.replace("\\", "/").rstrip("/"))


def entries(output: str) -> List[str]:
  """Names directly inside the output directory (files and directories); [] when missing.
  On object stores, the first path component of every object under the prefix."""
  if paths.is_remote(output):
    from apache_beam.io.filesystems import FileSystems
    prefix = output.rstrip("/") + "/"
    try:
      found = FileSystems.match([paths.glob_escape(prefix) + "**"])[0].metadata_list
    except Exception:
      return []
    return sorted({m.path[len(prefix):].split("/", 1)[0] for m in found
                   if m.path.startswith(prefix) and len(m.path) > len(prefix)})
  try:
    return sorted(os.listdir(output))
  except FileNotFoundError:
    return []
  except NotADirectoryError:
    raise UsageError(f"--output {output} is a file, not a directory") from None


def read_json(uri: str) -> Dict:
  """A JSON file this tool wrote (a manifest, a journal); locally never through a link in its
  last component (OSError ELOOP), nor a FIFO or a directory (InputError not_a_file)."""
  if paths.is_remote(uri):
    with files.open_read(uri) as f:
      return json.loads(f.read().decode("utf-8"))
  with files.open_local(uri, follow=False) as f:
    return json.loads(f.read().decode("utf-8"))


def _kind(mode: int) -> str:
  return ("a directory" if stat.S_ISDIR(mode) else "a file" if stat.S_ISREG(mode) else
          "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
          "a device")


def not_a_plain_file(path: str) -> Optional[str]:
  """What stands at the local `path` when it is not a regular file reached without a link
  ('a symbolic link to a directory', 'a FIFO', ...): this tool writes only regular files, so
  it is not one it wrote. None when it is one, or missing, or remote (no links there)."""
  if paths.is_remote(path):
    return None
  try:
    mode = os.lstat(path).st_mode
  except (FileNotFoundError, NotADirectoryError):
    return None
  if stat.S_ISREG(mode):
    return None
  if not stat.S_ISLNK(mode):
    return _kind(mode)
  try:  # a stat, never an open: what the link leads to is only named
    return f"a symbolic link to {_kind(os.stat(path).st_mode)}"
  except OSError:
    return "a dangling symbolic link"


def write_atomic(directory: str, name: str, data: bytes) -> None:
  """Write directory/name (a plain name: paths.plain_name) under a hidden name of ours beside
  it, then rename it into place."""
  from apache_beam.io.filesystems import FileSystems
  uri = paths.child(directory, name)
  tmp = paths.child(directory, f"{OWN_PREFIX}tmp-{name}")
  with FileSystems.create(tmp) as f:
    f.write(data)
  FileSystems.rename([tmp], [uri])


class IncompleteOutput(Exception):
  """The output has no manifest because a run was killed while replacing it."""


def load_manifest(output: str) -> Manifest:
  """The output's manifest.json, typed (ValueError naming a field of the wrong type)."""
  return Manifest.from_json(read_manifest(output))


def read_manifest(output: str) -> Dict:
  try:
    return read_json(paths.join(output, MANIFEST))
  except Exception:
    if journal_exists(output):
      raise incomplete(output) from None
    raise


def journal_exists(output: str) -> bool:
  """Whether the output holds a swap journal: locally anything under its name, a link too."""
  uri = paths.join(output, JOURNAL)
  return os.path.lexists(uri) if not paths.is_remote(uri) else files.exists(uri, strict=True)


def incomplete(output: str) -> IncompleteOutput:
  """What the read-back commands say while a swap journal is pending: run `verify --repair`,
  or, when it would refuse that journal, why and what to remove (issue 40, item 7: a forged
  journal sent users to a repair that refused it, and neither said what to do next)."""
  refusal = journal_refusal(output)
  if refusal:
    return IncompleteOutput(f"{output}: a replacement is pending that cannot be completed: "
                            f"{refusal}")
  return IncompleteOutput(
      f"{output}: a run was interrupted while replacing the output; run "
      f"`beam-tfrecord verify --repair {output}` (or the next convert) to complete it")


def files_of(manifest: Union[Manifest, Dict]) -> List[str]:
  """Every file a finished run wrote into the output, manifest.json included. Manifests from
  before the `files` list are read from their shard, error and label map entries.

  These are the names an --overwrite deletes, and a manifest is plain JSON anyone can edit:
  UnsafeName (a ValueError) unless every one is a plain name directly inside the output."""
  try:
    manifest = Manifest.of(manifest)
  except ValueError as e:  # its file list cannot be told: nothing may be deleted by it
    raise paths.UnsafeName(str(e)) from None
  if manifest.files is not None:
    listed = list(manifest.files)
  else:
    listed = [LABEL_MAP]
    for entry in manifest.splits.values():
      listed.extend(s.path for s in entry.shards)
    listed.extend(manifest.errors.files)
  return sorted({paths.plain_name(name) for name in listed} | {MANIFEST})


def name_inside(path: str, output: str) -> Optional[str]:
  """The first component of `path` below `output`, or None when it is not inside it."""
  if paths.is_remote(path) != paths.is_remote(output):
    return None
  if paths.is_remote(path):
    a, b = path.rstrip("/"), output.rstrip("/") + "/"
    return a[len(b):].split("/", 1)[0] if a.startswith(b) and len(a) > len(b) else None
  rel = os.path.relpath(os.path.abspath(path), os.path.abspath(output))
  if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
    return None
  return rel.split(os.sep, 1)[0]


def check_ownership(output: str, overwrite: bool, inputs: Iterable[str],
                    writes: Iterable[str] = (MANIFEST, LABEL_MAP)) -> Optional[Dict]:
  """Decide, before anything is written, whether a run may replace what is in `output`.

  Returns the previous run's manifest (None when there is none). Raises UsageError (exit 2)
  when the directory holds foreign files (listed, nothing deleted), when it holds an earlier
  run and `overwrite` is off, or when an input (label map, annotations, images) inside the
  output has a name the new output would replace.
  """
  names = entries(output)
  if not names:
    return None
  previous = None
  if MANIFEST in names:
    odd = not_a_plain_file(paths.join(output, MANIFEST))
    if odd:  # read through a link, it would be another directory's manifest
      raise UsageError(f"{paths.join(output, MANIFEST)} is {odd}, not a manifest this tool "
                       f"wrote; refusing to replace that directory. Nothing was deleted; move "
                       f"it out of {output} or choose another --output")
    try:
      previous = read_json(paths.join(output, MANIFEST))
    except Exception as e:
      raise UsageError(f"{output}/{MANIFEST} is unreadable ({type(e).__name__}: {e}); it is "
                       "not an output this tool can replace") from None
    if not isinstance(previous, dict) or previous.get("tool") != "beam-tfrecord":
      raise UsageError(f"{output}/{MANIFEST} was not written by beam-tfrecord; refusing to "
                       "replace that directory")
  try:
    owned = set(files_of(previous)) if previous else set()
  except (paths.UnsafeName, TypeError, AttributeError, KeyError) as e:
    raise UsageError(f"{output}/{MANIFEST} does not list its files as plain names inside "
                     f"the output ({type(e).__name__}: {e}); refusing to replace that "
                     "directory. Nothing was deleted") from None
  # a listed file replaced by a link or a directory is not the file the run wrote: the swap
  # would refuse it after the whole pipeline (issue 40, item 6), so refuse it before
  odd = [f"{n} ({what})" for n in names if n in owned
         for what in [not_a_plain_file(paths.child(output, n))] if what]
  if odd:
    shown = named_few(odd, 20)
    raise OutputNotEmpty(f"output directory {output} holds, under names its {MANIFEST} lists, "
                         f"what this tool did not write: {shown}. Nothing was deleted; move "
                         "them out of the output directory or choose another --output")
  input_names = {n for n in (name_inside(i, output) for i in inputs) if n}
  clash = sorted(input_names & (owned | set(writes)))
  if clash:
    raise UsageError(f"input {clash[0]!r} lies in the output directory {output} under a name "
                     "this run writes; move it out of the output directory first")
  foreign = [n for n in names
             if not n.startswith(OWN_PREFIX) and n not in owned and n not in input_names]
  if foreign:
    shown = named_few(foreign, 20)
    raise OutputNotEmpty(f"output directory {output} holds files this tool did not write: "
                         f"{shown}. Nothing was deleted; choose another --output or move them")
  if previous is not None and not overwrite:
    raise OutputNotEmpty(f"output directory {output} holds an earlier run (created "
                         f"{previous.get('created')}); pass --overwrite to replace it once "
                         "the new run has succeeded")
  return previous


def remove_leftovers(output: str, keep: Sequence[str] = ()) -> None:
  """Remove run directories of earlier runs (finished, failed or killed) and our temporary
  files. Called with the output lock held, so none of them belongs to a live run."""
  for name in entries(output):
    if name.startswith(OWN_PREFIX) and name not in (LOCK, JOURNAL) and name not in keep:
      _delete_tree(paths.child(output, name))


def _delete_tree(uri: str) -> None:
  from apache_beam.io.filesystems import FileSystems
  if paths.is_remote(uri):
    found = _match_all(uri)
    if found:
      FileSystems.delete(found)
  elif os.path.isdir(uri):
    import shutil
    shutil.rmtree(uri, ignore_errors=True)
  elif os.path.lexists(uri):
    os.remove(uri)


def _match_all(prefix: str) -> List[str]:
  from apache_beam.io.filesystems import FileSystems
  try:
    return [m.path for m in FileSystems.match(
        [paths.glob_escape(prefix.rstrip("/")) + "/**"])[0].metadata_list]
  except Exception:
    return []


def delete_files(directory: str, names: Iterable[str]) -> None:
  """Delete the files directory/name that exist; each name is checked (paths.child) and,
  locally, is a regular file reached without a link, removed by one unlink (Beam's delete
  globs the name and removes a directory it finds there, whole)."""
  from apache_beam.io.filesystems import FileSystems
  if not paths.is_remote(directory):
    for uri in (paths.child(directory, n) for n in names):
      odd = not_a_plain_file(uri)
      if odd:
        raise UsageError(f"{uri} is {odd}, not a file this tool wrote; it was not deleted")
      with contextlib.suppress(FileNotFoundError):
        os.unlink(uri)
    return
  present = [u for u in (paths.child(directory, n) for n in names) if FileSystems.exists(u)]
  if present:
    FileSystems.delete(present)


def share_file(src: str, directory: str, name: str) -> None:
  """An earlier version's file (--append: an unchanged shard or its catalog partition) put
  into `directory` as `name` without reading it: a hard link locally (a copy across file
  systems), a server-side copy on object stores (gs:// rewrites, never a download).
  Idempotent."""
  dst = paths.child(directory, name)  # checked where it is written
  if paths.is_remote(dst):
    from apache_beam.io.filesystems import FileSystems
    FileSystems.copy([src], [dst])
    return
  import errno
  import shutil
  try:
    os.link(src, dst)
  except FileExistsError:
    if not os.path.samefile(src, dst):
      os.replace(_linked_copy(src, dst), dst)
  except OSError as e:
    if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
      raise
    tmp = dst + ".copy"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _linked_copy(src: str, dst: str) -> str:
  """A hard link to `src` beside `dst`, under a temporary name."""
  tmp = f"{dst}.link-{os.getpid()}"
  if os.path.lexists(tmp):
    os.remove(tmp)
  os.link(src, tmp)
  return tmp


def commit(output: str, run_directory: str, manifest: Union[Manifest, Dict],
           protected: Iterable[str] = ()) -> None:
  """Replace the output's previous files with the run's (journaled, see the module doc).

  `manifest` is the new run's, already written as RUN/manifest.json; its `files` are in RUN.
  `protected` names in the output (inputs inside it) are never deleted.
  """
  previous = None
  try:
    previous = read_json(paths.join(output, MANIFEST))
  except Exception:
    pass
  old = [f for f in (files_of(previous) if previous else []) if f not in set(protected)]
  journal = {"run_id": Manifest.of(manifest).run_id, "run_dir": _basename(run_directory),
             "files": files_of(manifest), "old_files": old}
  check_journal(journal)
  check_swap_entries(output, run_directory, journal)  # before the journal: nothing to undo
  write_atomic(output, JOURNAL, json.dumps(journal, indent=1).encode())
  kill_point("swap-journal")
  _roll_forward(output, journal)


def check_journal(journal: object, output: Optional[str] = None) -> None:
  """UsageError unless a swap journal names a run directory of ours and only plain file names:
  it is read back from the output (recover), where anyone can edit it. With `output` (a
  journal read back), the message names the journal to remove."""
  try:
    if not isinstance(journal, dict):
      raise paths.UnsafeName("it is not a JSON object")
    if not paths.plain_name(journal.get("run_dir")).startswith(RUN_PREFIX):
      raise paths.UnsafeName(f"run_dir {journal['run_dir']!r} is not a run directory")
    for key in ("files", "old_files"):
      if not isinstance(journal.get(key), list):
        raise paths.UnsafeName(f"{key!r} is not a list of file names")
      for name in journal[key]:
        paths.plain_name(name)
  except paths.UnsafeName as e:
    where = paths.join(output, JOURNAL) if output is not None else JOURNAL
    raise UsageError(f"the swap journal {where} is not one this tool wrote ({e}); nothing "
                     f"was deleted or moved{_remove_journal(output)}") from None


def _remove_journal(output: Optional[str]) -> str:
  """The way out of a journal no run can complete (issue 40, item 7): removing it leaves the
  output as it is, and verify then says what that is."""
  if output is None:
    return ""
  return (f". Nothing can complete it: remove {paths.join(output, JOURNAL)}, then run "
          f"`beam-tfrecord verify {output}`")


def check_swap_entries(output: str, run_directory: str, journal: Dict,
                       pending: bool = False) -> None:
  """Before a swap moves or deletes anything (locally): the run directory is a real directory
  of the output, not a link to another one, and every name the journal lists is, where it
  exists, a regular file reached without a link, in the output (old files) or the run
  directory (new files). UsageError (exit 2) otherwise, with nothing changed: a journal or a
  manifest is read back from the output, where anyone can edit it (issue 30, items 1 and 7).
  `pending`: the journal is in the output already, and the message says what to remove."""
  if paths.is_remote(output):
    return
  odd = not_a_plain_file(run_directory)
  if odd and odd != "a directory":
    raise UsageError(f"the swap journal's run directory {run_directory} is {odd}, not one "
                     "this tool made; nothing was moved or deleted"
                     + _remove_journal(output if pending else None))
  checks = [(run_directory, n) for n in journal["files"]] + [
      (output, n) for n in journal["old_files"]] + [(output, n) for n in journal["files"]]
  for directory, name in checks:
    path = paths.child(directory, name)
    odd = not_a_plain_file(path)
    if odd:
      then = (f". Move it out of {directory} and run `beam-tfrecord verify --repair {output}` "
              f"again, or, if no replacement should be pending, remove "
              f"{paths.join(output, JOURNAL)}" if pending else "")
      raise UsageError(f"{path} is {odd}, not a file this tool wrote; nothing was moved or "
                       f"deleted{then}")


def _roll_forward(output: str, journal: Dict) -> None:
  """Idempotent: each step checks what is already done, so a repeat after a kill finishes.
  Every name is checked before the first step (check_journal) and again where it is used."""
  from apache_beam.io.filesystems import FileSystems
  check_journal(journal, output)
  run_directory = paths.child(output, journal["run_dir"])
  check_swap_entries(output, run_directory, journal, pending=True)
  new_files = [f for f in journal["files"] if f != MANIFEST]
  if FileSystems.exists(paths.child(run_directory, MANIFEST)):
    delete_files(output, [MANIFEST])
    kill_point("swap-old-manifest")
    delete_files(output, [f for f in journal["old_files"] if f not in journal["files"]])
    kill_point("swap-old-files")
    for i, name in enumerate(new_files):
      src = paths.child(run_directory, name)
      if FileSystems.exists(src):
        FileSystems.rename([src], [paths.child(output, name)])
      if i == 0:
        kill_point("swap-move")
    FileSystems.rename([paths.child(run_directory, MANIFEST)], [paths.child(output, MANIFEST)])
    kill_point("swap-manifest")
  _delete_tree(run_directory)
  delete_files(output, [JOURNAL])


def recover(output: str) -> Optional[str]:
  """Complete a replacement that was killed part way. Returns what was done, or None."""
  journal = pending_swap(output)
  if journal is None:
    return None
  _roll_forward(output, journal)
  return (f"completed the interrupted replacement by run {journal.get('run_id')} "
          f"({len(journal['files'])} files)")


def pending_swap(output: str) -> Optional[Dict]:
  """The journal of an interrupted replacement, or None. UsageError, naming the journal to
  remove, when it is a link, a directory or not JSON: no run of ours left it so."""
  uri = paths.join(output, JOURNAL)
  if not journal_exists(output):
    return None
  odd = not_a_plain_file(uri)
  if odd:
    raise UsageError(f"the swap journal {uri} is {odd}, not one this tool wrote; nothing was "
                     f"deleted or moved{_remove_journal(output)}")
  try:
    return read_json(uri)
  except ValueError as e:  # not JSON, not UTF-8 (an OSError may pass: a store not reached)
    raise UsageError(f"the swap journal {uri} is not one this tool wrote ({type(e).__name__}: "
                     f"{e}); nothing was deleted or moved{_remove_journal(output)}") from None


def journal_refusal(output: str) -> Optional[str]:
  """Why `verify --repair` would refuse the output's pending journal, naming what to remove;
  None when there is none or it can be rolled forward. Reads and lstats only."""
  try:
    journal = pending_swap(output)
    if journal is not None:
      check_journal(journal, output)
      check_swap_entries(output, paths.child(output, journal["run_dir"]), journal,
                         pending=True)
  except UsageError as e:
    return str(e)
  return None


def _shard_kind(manifest: Manifest) -> str:
  """What the shards are besides TFRecords: another --file-format, --index-files ('' if
  neither)."""
  file_format = record_files.file_format_of(manifest)
  kinds = [file_format] if file_format != record_files.TFRECORD else []
  if manifest.setting("index_files"):
    kinds.append("index files")
  return ", ".join(kinds)


def append_line(incremental: Dict) -> str:
  """--append's line of the summary: what the version did with the one before."""
  images, shards = incremental["images"], incremental["shards"]
  return (f"append: {images['added']:,} added, {images['changed']:,} changed, "
          f"{images['removed']:,} removed, {images['kept']:,} kept; "
          f"{shards['delta_written']:,} delta shard{'s' * (shards['delta_written'] != 1)} "
          f"written, {shards['rewritten']:,} shard{'s' * (shards['rewritten'] != 1)} "
          f"rewritten, {shards['kept']:,} kept")


def leakage_line(leakage: Leakage) -> str:
  """The summary's line on copies by content (write/contents.py), and what was not compared."""
  line = (f"identical bytes: {leakage.leaked_across_splits:,} leaked across splits, "
          f"{leakage.duplicate_content:,} duplicate content within a split")
  if leakage.images_unchecked:
    line += (f"; {leakage.images_checked:,} images compared, {leakage.images_unchecked:,} "
             "kept from the earlier output not read")
  return line


def summary(manifest: Union[Manifest, Dict], output: str,
            seconds: Optional[float] = None) -> str:
  manifest = Manifest.of(manifest)
  totals, errors = manifest.totals, manifest.errors
  # errors.count counts every report; a warning's image was converted all the same
  warnings = errors.warnings
  # a schema writing one record per object (or none for some images): say records, not images
  per_image = totals.get("images", totals["examples"]) == totals["examples"]
  count = "images" if per_image else "records"
  lines = [f"beam-tfrecord {manifest.version}: {manifest.format} -> {output}"]
  lines.append(f"  {'split':<12}{count:>9}{'objects':>10}{'shards':>8}{'MB':>10}")
  for split, entry in manifest.splits.items():
    lines.append(f"  {split:<12}{entry.examples:>9}{entry.objects:>10}"
                 f"{entry.num_shards:>8}{entry.bytes / 1e6:>10.2f}")
  written = (f"images {totals['examples']}" if per_image else
             f"records {totals['examples']} (of {totals['images']} images)")
  kind = _shard_kind(manifest)
  lines.append(f"  {written}, objects {totals['objects']}, classes "
               f"{len(manifest.label_map)}, shards "
               f"{manifest.num_shards}{f' ({kind})' if kind else ''}, clipped boxes "
               f"{totals['clipped_boxes']}, errors {errors.count - warnings}"
               + (f", warnings {warnings}" if warnings else "")
               + (f", {seconds:.1f} s" if seconds is not None else ""))
  leakage = manifest.leakage
  if leakage is not None and (leakage.copies or leakage.images_unchecked):
    lines.append(f"  {leakage_line(leakage)}")
  if manifest.incremental and manifest.incremental["mode"] == "append":
    lines.append(f"  {append_line(manifest.incremental)}")
  excluded = manifest.excluded_classes
  if excluded:
    top = sorted(excluded.items(), key=lambda kv: (-kv[1], kv[0]))
    listed = ", ".join(f"{name} {n}" for name, n in top[:8]) + (" ..." if len(top) > 8 else "")
    # what became of the images left without objects depends on the schema: box schemas
    # keep them as background images, per-image label schemas reject them (not_one_class)
    from beam_tfrecord import schemas
    image_label = any(schemas.get(option).image_level for option in schemas.REGISTRY
                      if schemas.get(option).name == manifest.schema)  # the manifest: NAME
    lost = errors.by_reason.get("not_one_class", 0)
    fate = (f"images left without a class were not written (not_one_class {lost})"
            if image_label or lost else
            "images left without objects were kept as background images")
    lines.append(f"  excluded by --classes: {sum(excluded.values())} objects ({listed}); "
                 f"{fate}")
  # excluded_class has its own line above, and no line in errors-*.jsonl
  listed_reasons = {k: v for k, v in errors.by_reason.items()
                    if not (excluded and k == "excluded_class")}
  if listed_reasons:
    reasons = ", ".join(f"{k} {v}" for k, v in listed_reasons.items())
    kinds = "errors and warnings" if warnings else "errors"
    lines.append(f"  {kinds} by reason: {reasons} (details in "
                 f"{', '.join(errors.files) or 'errors-*.jsonl'})")
  return "\n".join(lines)
