"""`beam-tfrecord show`: a grid of examples drawn from the records themselves.

Boxes in their class colour with the class name, keypoints as dots in that colour (joined by
the manifest's skeleton; unlabelled points left out), masks as translucent overlays (a class
mask, deeplab's, as one overlay per class present: 255, ignore, in light grey), and for
classification records a frame in the class colour with the class as caption. What is drawn
comes only from the TFRecords and manifest.json (through views.py), never from the source
files, so the picture shows what a trainer will read.
"""
from __future__ import annotations

import colorsys
import hashlib
import math
import random
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from PIL import Image, ImageDraw, ImageFont

from beam_tfrecord.finalize import card
from beam_tfrecord.readback import views
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.storage import record_files, versions

TILE = 256           # each image is scaled to fit TILE x TILE
PAD = 6              # between tiles
CAPTION = 18         # text line under each tile
LINE = 3             # box outline width in pixels
MASK_ALPHA = 0.45    # mask overlay opacity
BACKGROUND = (24, 24, 24)
IGNORE_LABEL = views.IGNORE_LABEL  # a class mask's ignore regions (VOC's border, crowds)
POINT = 3            # keypoint dot radius in grid pixels
IGNORE_COLOR = (235, 235, 235)
HALO = (0, 0, 0)
# Evenly spread, saturated hues: neighbouring class ids get distant colours.
PALETTE: Tuple[Tuple[int, int, int], ...] = tuple(
    tuple(round(c * 255) for c in colorsys.hsv_to_rgb(((i * 7) % 20) / 20, 0.85, 1.0))
    for i in range(20))


def box_color(label: str, label_map: Mapping[str, int]) -> Tuple[int, int, int]:
  """The colour of a class: by its rank in the label map (ordered by id; raw ids put COCO's
  neighbours 'person' 1 and 'dog' 18 on near-identical reds), else by a hash of its name."""
  if label in label_map:
    index = sorted(label_map, key=lambda name: (int(label_map[name]), name)).index(label)
  else:
    index = int.from_bytes(hashlib.sha256(label.encode("utf-8")).digest()[:4], "big")
  return PALETTE[index % len(PALETTE)]


def _font(size: int):
  try:
    return ImageFont.load_default(size=size)
  except TypeError:  # Pillow built without FreeType: fixed-size bitmap font
    return ImageFont.load_default()


def _text_color(fill: Tuple[int, int, int]) -> Tuple[int, int, int]:
  luma = 0.299 * fill[0] + 0.587 * fill[1] + 0.114 * fill[2]
  return (0, 0, 0) if luma > 140 else (255, 255, 255)


def _overlay_masks(image: Image.Image, masks: Sequence[bytes], colors: Sequence[Tuple]) -> None:
  """Blend each object's mask (PNG, non-zero = object) in its colour, in place."""
  import io
  for data, color in zip(masks, colors):
    try:
      with Image.open(io.BytesIO(data)) as m:
        mask = m.convert("L").resize(image.size, Image.NEAREST)
    except Exception:  # an unreadable mask is left out of the picture, not fatal
      continue
    alpha = mask.point(lambda v: round(255 * MASK_ALPHA) if v else 0)
    image.paste(Image.new("RGB", image.size, color), (0, 0), alpha)


def _label(draw: ImageDraw.ImageDraw, xy: Tuple[float, float], text: str, color, font,
           bounds: Tuple[int, int, int, int]) -> None:
  """Class name on a patch of its colour, above the box's top-left corner when there is
  room inside the tile, else just inside the box."""
  left, top, right, _ = bounds
  x0, y0 = xy
  tw, th = draw.textbbox((0, 0), text, font=font)[2:]
  x = min(max(x0, left), right - tw - 2)
  y = y0 - th - 3 if y0 - th - 3 >= top else y0 + LINE
  draw.rectangle([x, y, x + tw + 3, y + th + 2], fill=color)
  draw.text((x + 2, y), text, fill=_text_color(color), font=font)


def _keypoints(draw: ImageDraw.ImageDraw, points: Sequence[Tuple[float, float, int]],
               skeleton: Sequence[Sequence[int]], color, at: Tuple[int, int],
               scale: float) -> None:
  """One object's labelled points (visibility 1 or 2) as dots of its class colour with a
  dark halo, the skeleton's edges between labelled points under them."""
  x, y = at
  placed = [(x + round(px * scale), y + round(py * scale)) if v else None
            for px, py, v in points]
  for edge in skeleton:
    ends = [placed[i] if 0 <= i < len(placed) else None for i in edge[:2]]
    if len(ends) == 2 and None not in ends:
      draw.line(ends, fill=HALO, width=3)
      draw.line(ends, fill=color, width=1)
  for point in placed:
    if point is not None:
      px, py = point
      draw.ellipse([px - POINT, py - POINT, px + POINT, py + POINT], fill=color, outline=HALO)


def render(items: Sequence[views.Item], label_map: Mapping[str, int], tile: int = TILE,
           columns: Optional[int] = None, title: Optional[str] = None,
           skeleton: Sequence[Sequence[int]] = ()) -> Image.Image:
  """The grid picture of these records. `grid.info["tiles"]` lists, per record, where its
  image was placed: {"name", "x", "y", "scale"} (grid pixel = x + scale * image pixel).
  `skeleton`: the keypoint edges (0-based index pairs) drawn between an object's points."""
  columns = columns or max(1, min(len(items), math.ceil(math.sqrt(len(items)))))
  rows = max(1, math.ceil(len(items) / columns))
  font, small = _font(13), _font(11)
  head = 24 if title else 0
  width = PAD + columns * (tile + PAD)
  if title:  # never cut the title off a narrow grid
    width = max(width, 2 * PAD + round(ImageDraw.Draw(Image.new("RGB", (1, 1)))
                                        .textlength(title, font=font)))
  grid = Image.new("RGB", (width, head + PAD + rows * (tile + CAPTION + PAD)), BACKGROUND)
  draw = ImageDraw.Draw(grid)
  if title:
    draw.text((PAD, 5), title, fill=(235, 235, 235), font=font)
  placed = []
  for index, entry in enumerate(items):
    cx = PAD + (index % columns) * (tile + PAD)
    cy = head + PAD + (index // columns) * (tile + CAPTION + PAD)
    picture = views.to_pil(entry)
    scale = min(tile / picture.width, tile / picture.height)
    size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
    picture = picture.resize(size, Image.BILINEAR)
    colors = [IGNORE_COLOR if label == IGNORE_LABEL else box_color(label, label_map)
              for label in entry.labels]
    _overlay_masks(picture, entry.masks, colors)
    x, y = cx + (tile - size[0]) // 2, cy + (tile - size[1]) // 2
    grid.paste(picture, (x, y))
    bounds = (cx, cy, cx + tile, cy + tile)
    boxes = list(zip(entry.boxes, entry.labels))
    if entry.caption is not None:  # classification: the whole image is the labelled region
      boxes = [((0, 0, picture.width / scale, picture.height / scale), entry.caption)]
    labels = []  # drawn after every outline, so that no outline crosses a class name
    for (x0, y0, x1, y1), label in boxes:
      color = box_color(label, label_map)
      corners = [x + round(x0 * scale), y + round(y0 * scale),
                 x + max(round(x0 * scale), round(x1 * scale) - 1),
                 y + max(round(y0 * scale), round(y1 * scale) - 1)]
      # a dark 1-pixel halo keeps the outline visible on a background of its own colour
      draw.rectangle([corners[0] - 1, corners[1] - 1, corners[2] + 1, corners[3] + 1],
                     outline=HALO, width=1)
      draw.rectangle(corners, outline=color, width=LINE)
      if entry.caption is None and label:
        labels.append(((corners[0], corners[1]), label, color))
    for points, label in zip(entry.keypoints, entry.labels):
      _keypoints(draw, points, skeleton, box_color(label, label_map), (x, y), scale)
    for xy, label, color in labels:
      _label(draw, xy, label, color, small, bounds)
    caption_x = cx
    if entry.caption is not None:  # the class on a patch of its colour, then the file name
      color = box_color(entry.caption, label_map)
      text_width = round(draw.textlength(entry.caption, font=font))
      draw.rectangle([cx, cy + tile + 2, cx + text_width + 5, cy + tile + CAPTION - 1],
                     fill=color)
      draw.text((cx + 3, cy + tile + 2), entry.caption, fill=_text_color(color), font=font)
      caption_x += text_width + 10
    _fit_text(draw, (caption_x, cy + tile + 2), entry.name, tile - (caption_x - cx), font)
    placed.append({"name": entry.name or entry.group, "x": x, "y": y, "scale": scale})
  grid.info["tiles"] = placed
  return grid


def _fit_text(draw: ImageDraw.ImageDraw, xy, text: str, width: int, font) -> None:
  """Text cut with an ellipsis to fit the tile's width."""
  while text and draw.textlength(text, font=font) > width:
    text = text[:-2] + "…" if len(text) > 2 else ""
  draw.text(xy, text, fill=(220, 220, 220), font=font)


def pick(counts: Sequence[Optional[int]], n: int, seed: int) -> Dict[int, List[int]]:
  """{shard index: sorted record indices in it}: n records chosen uniformly with the seed.
  Needs every shard's record count (the manifest has them, except after --sink beam)."""
  total = sum(counts)
  chosen = sorted(random.Random(seed).sample(range(total), min(n, total)))
  result: Dict[int, List[int]] = {}
  start = 0
  for shard, count in enumerate(counts):
    inside = [i - start for i in chosen if start <= i < start + count]
    if inside:
      result[shard] = inside
    start += count
  return result


def sample(output: str, manifest: Union[Manifest, Mapping], split: str, n: int,
           seed: int) -> List[views.Item]:
  """n records of a split as Items, chosen with the seed; reads only the shards (and the
  part of each) that hold them when the manifest knows the shard counts."""
  manifest = Manifest.of(manifest)
  view = views.resolve(manifest)
  names = views.class_names(manifest)
  shards = views.shard_paths(output, manifest, split)
  file_format = record_files.file_format_of(manifest)
  if all(count is not None for _, count in shards):
    records = []
    for shard, wanted in pick([c for _, c in shards], n, seed).items():
      keep = set(wanted)
      for i, record in enumerate(record_files.read_records(shards[shard][0], file_format,
                                                           wanted[-1] + 1)):
        if i in keep:
          records.append(record)
  else:  # per-shard counts unknown: one pass with reservoir sampling
    rng, records, seen = random.Random(seed), [], 0
    for uri, _ in shards:
      for record in record_files.read_records(uri, file_format):
        seen += 1
        if len(records) < n:
          records.append(record)
        elif rng.randrange(seen) < n:
          records[rng.randrange(n)] = record
  # a class mask (deeplab's) comes as one mask per class present (views.class_regions)
  return [views.item(views.parse(record), view, names) for record in records]


def show(output: str, split: Optional[str] = None, n: int = 16, seed: int = 0,
         tile: int = TILE) -> Image.Image:
  """A PIL image of n examples of one split (default: train, else the first split).

  `output` may be a versioned output's DEST: LATEST is read once and every record comes from
  the version it names. `picture.info["read"]` is the directory read, `picture.info["version"]`
  the version number (None for an ordinary output or a version directory given itself)."""
  directory, number = versions.locate(output)
  manifest = views.read_manifest(directory)
  split = split or card.default_split(manifest)
  items = sample(directory, manifest, split, n, seed)
  total = manifest.splits[split].examples
  name = output.rstrip("/").rsplit("/", 1)[-1]
  if number is not None:
    name += f" · {versions.label(number)}"
  title = (f"{name} · {split} · {len(items)} of "
           f"{total} records · schema {manifest.schema}")
  skeleton = (manifest.keypoints or {}).get("skeleton", ())
  picture = render(items, manifest.label_map, tile=tile, title=title, skeleton=skeleton)
  picture.info["read"], picture.info["version"] = directory, number
  return picture
