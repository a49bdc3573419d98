"""What a finished run's manifest says: per-split entries, error rate, outcome. Pure. The
manifest's types are records/manifest.py."""
from __future__ import annotations

import posixpath
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from beam_tfrecord.plan.shard_plan import SplitPlan
from beam_tfrecord.records.manifest import ShardInfo, SplitInfo
from beam_tfrecord.storage import paths
from beam_tfrecord.write.shard_writer import merge_stats, new_stats

# What a finished run's manifest says ("outcome") and the exit code the CLI gives it.
OUTCOMES = {"ok": 0, "lost_records": 1, "lock_lost": 1, "no_images": 2, "usage": 2,
            "error_rate": 3, "empty": 4, "incomplete": 4}

# Error reasons that only a change of the command line fixes, found by the workers because
# the launcher reads no input whole: any one fails the run ("usage", exit 2, as a UsageError
# at launch would), whatever else it wrote. The record's key names the file and its message
# says what to do (the CLI's last line); here, what the status says.
USAGE_REASONS = {
    "category_zero_used": "annotations use category id 0, which the TF OD API reserves for "
                          "background; give --label-map with an id >= 1 for that category's "
                          "name",
    "unknown_class_selected": "--classes or --class-map names a class the source does not "
                              "have",
}


def error_rate(images: int, levels: Mapping[str, int]) -> float:
  """Rejections per image seen: file, image and object errors over (converted + rejected
  images). Warnings (the image was converted) do not count."""
  rejected = sum(n for level, n in levels.items() if level != "warning")
  seen = images + levels.get("image", 0)
  return rejected / seen if seen else (1.0 if rejected else 0.0)


def split_entries(stats: Sequence[Dict], beam_files: Sequence[str]) -> Dict[str, SplitInfo]:
  """Manifest entries per split: shard stats merged (sink.merge_stats) plus the shard list."""
  by_split: Dict[str, List[Dict]] = {}
  for s in sorted(stats, key=lambda s: (s["split"], -1 if s["shard"] is None else s["shard"])):
    by_split.setdefault(s["split"], []).append(s)
  shard_files: Dict[str, List[ShardInfo]] = {
      split: [ShardInfo(s["path"], s["examples"], s["objects"], s["bytes"])
              for s in items if s["shard"] is not None]
      for split, items in by_split.items()}
  for path in sorted(beam_files):  # --sink beam: per-file counts are unknown
    name = posixpath.basename(path.replace("\\", "/"))
    shard_files.setdefault(name.rsplit("-", 3)[0], []).append(
        ShardInfo(name, None, None, paths.size_of(path)))
  splits = {}
  for split, files in sorted(shard_files.items()):
    total = merge_stats(by_split.get(split) or [new_stats(split, None, "")])
    splits[split] = SplitInfo(
        examples=total["examples"], images=total["images"], objects=total["objects"],
        bytes=sum(f.bytes for f in files) if beam_files else total["bytes"],
        clipped_boxes=total["clipped"], reoriented_images=total["reoriented"],
        classes=total["classes"], shards=tuple(files))
  return splits


def empty_splits(declared: Sequence[str], splits: Mapping[str, SplitInfo]) -> List[str]:
  """The splits declared before running (by the source, or --split) that hold no example."""
  return sorted(s for s in set(declared) if s not in splits or not splits[s].examples)


def main_reasons(reasons: Mapping[str, int], top: int = 3) -> str:
  """'reason count, ...' of the most frequent error reasons (errors carry no split: the
  run's)."""
  items = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
  return ", ".join(f"{reason} {n}" for reason, n in items) or "no error recorded"


def outcome_of(totals: Mapping[str, int], levels: Mapping[str, int], rate: float,
               limit: Optional[float], lost: str, empty: Sequence[str] = (),
               reasons: Optional[Mapping[str, int]] = None) -> Tuple[str, str]:
  """(outcome, status) of a finished run; status is 'ok' or 'failed: why'. Nothing written
  is never a success: with no image even seen it is 'no_images', else 'empty'; so is a
  declared split left with no example (`empty`, empty_splits) and objects that were all
  rejected (a label map that matches no class: images written without their boxes). So is
  an error at file level ('incomplete': what the file described, or its rest, is missing in
  an unknown amount) unless --max-error-rate says how much may be rejected; each then counts
  one in the rate. An error of USAGE_REASONS fails it first: the output would be wrong
  whatever the counts."""
  usage = sorted(r for r in USAGE_REASONS if (reasons or {}).get(r))
  if usage:
    return "usage", "failed: " + "; ".join(
        f"{USAGE_REASONS[r]} (see the {r} errors in errors-*.jsonl)" for r in usage)
  if lost:
    return "lost_records", (f"failed: the runner lost records ({lost}); the output is "
                            "incomplete. Beam's multi_threading local mode did this under load "
                            "in our measurements")
  if not totals["examples"]:
    if not levels.get("image"):
      return "no_images", ("failed: no images found in the input (see errors-*.jsonl for "
                           "annotation files that could not be read)")
    return "empty", (f"failed: nothing was written: all {levels['image']} images were "
                     "rejected (see errors-*.jsonl)")
  why = main_reasons(reasons or {})
  if empty:
    names = ", ".join(repr(s) for s in empty)
    return "empty", (f"failed: split{'s' if len(empty) > 1 else ''} {names} declared by the "
                     f"input ended with no example (main reasons: {why}; see errors-*.jsonl)")
  if levels.get("object") and not totals["objects"]:
    return "empty", (f"failed: every object was rejected ({levels['object']} objects; the "
                     f"{totals['images']} images were written without boxes; main reasons: "
                     f"{why}; see errors-*.jsonl)")
  if levels.get("file") and limit is None:
    files = levels["file"]
    return "incomplete", (f"failed: {files} annotation file error{'s' if files > 1 else ''} "
                          f"left out what the file described, or the rest of it after where "
                          f"it broke (main reasons: {why}; see the level \"file\" errors in "
                          "errors-*.jsonl); fix the files, or accept a share of rejections "
                          "with --max-error-rate")
  if limit is not None and rate > limit:
    rejected = sum(n for level, n in levels.items() if level != "warning")
    copies = levels.get("copies", 0)  # written, but weighed as rejections (write/contents)
    counted = (f"{rejected} rejected inputs, {copies} of them extra copies of images "
               "(leaked_across_splits, duplicate_content)" if copies else
               f"{rejected} rejected inputs")
    return "error_rate", (f"failed: error rate {rate:.4g} exceeds --max-error-rate {limit:g} "
                          f"({counted}; see errors-*.jsonl)")
  return "ok", "ok"


def lost_records(plans: Mapping[str, SplitPlan], stats: Sequence[Dict]) -> str:
  """'' when every planned image was written or rejected, else what is missing per split."""
  done: Dict[str, int] = {}
  for s in stats:
    # images, not examples: a per-object schema writes several records per image
    done[s["split"]] = done.get(s["split"], 0) + s.get("images", s["examples"]) + s["rejected"]
  return ", ".join(f"split {split}: {plan.count} planned, {done.get(split, 0)} written or "
                   f"rejected" for split, plan in sorted(plans.items())
                   if done.get(split, 0) != plan.count)
