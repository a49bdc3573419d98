"""A Pascal VOC 2012 segmentation layout, written as VOC ships it: JPEGImages/<id>.jpg,
SegmentationClass/<id>.png, ImageSets/Segmentation/{train,val,trainval}.txt and, beside them,
Annotations/ and ImageSets/Main/ (which the deeplab schema does not read).

The class PNGs are what VOC's SegmentationClass/ holds (looked up: the VOCdevkit's
VOClabelcolormap.m, DeepLab's datasets/remove_gt_colormap.py, which reads them with
`np.array(Image.open(...))` to get the indices): 8-bit palette ("P") PNGs with VOC's colour
map, index i for the i-th class (1..20, 0 background), and 255 (the "void" colour
224,224,192) in a band along every object's outline.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
from PIL import Image, ImageDraw

# VOC's classes (the devkit's VOCopts.classes order: palette index i is the class i)
VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")
VOID = 255


def voc_colormap(n: int = 256) -> np.ndarray:
  """VOClabelcolormap.m: the bits of the index spread over r, g, b from the top bit down."""
  cmap = np.zeros((n, 3), np.uint8)
  for i in range(n):
    r = g = b = 0
    c = i
    for j in range(8):
      r |= ((c >> 0) & 1) << (7 - j)
      g |= ((c >> 1) & 1) << (7 - j)
      b |= ((c >> 2) & 1) << (7 - j)
      c >>= 3
    cmap[i] = (r, g, b)
  return cmap


def class_png(size: Tuple[int, int], objects: Sequence[Tuple[int, Sequence[Tuple[int, int]]]],
              border: int = 2) -> Image.Image:
  """A SegmentationClass PNG: each (index, polygon) filled with its index, later over
  earlier, and a void (255) band of `border` pixels along each outline, as VOC draws it."""
  image = Image.new("P", size, 0)
  image.putpalette(voc_colormap().flatten().tolist())
  draw = ImageDraw.Draw(image)
  for index, polygon in objects:
    draw.polygon(list(polygon), fill=index)
  for _, polygon in objects:
    draw.line(list(polygon) + [polygon[0]], fill=VOID, width=border)
  return image


def photo(size: Tuple[int, int], seed: int) -> Image.Image:
  """A JPEG-able picture with some structure (not one flat colour)."""
  rng = np.random.default_rng(seed)
  base = rng.integers(0, 255, size=(size[1] // 8 + 1, size[0] // 8 + 1, 3), dtype=np.uint8)
  return Image.fromarray(base).resize(size, Image.Resampling.BILINEAR)


# id -> (image size, [(class index, polygon)], split lists it is in)
IMAGES: Dict[str, Tuple[Tuple[int, int], List, Tuple[str, ...]]] = {
    "2007_000032": ((64, 48), [(1, [(4, 4), (40, 6), (30, 30)]),
                               (15, [(30, 20), (60, 22), (58, 44), (34, 40)])], ("train",)),
    "2007_000039": ((48, 64), [(20, [(10, 10), (38, 10), (38, 50), (10, 50)])], ("val",)),
    "2007_000063": ((50, 40), [(8, [(2, 2), (45, 5), (20, 35)]),
                               (12, [(15, 15), (48, 20), (40, 38)])], ("train",)),
    "2007_000068": ((40, 40), [], ("val",)),
}


def write_voc(root: Path, images: Dict = IMAGES, annotations: bool = True) -> Path:
  """VOCdevkit/VOC2012 under root with `images`; returns the VOC2012 directory. trainval.txt
  lists train and val, as VOC's does."""
  voc = root / "VOCdevkit" / "VOC2012"
  for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation",
                 "ImageSets/Main", "Annotations"):
    (voc / folder).mkdir(parents=True, exist_ok=True)
  lists: Dict[str, List[str]] = {"train": [], "val": [], "trainval": []}
  for seed, (stem, (size, objects, splits)) in enumerate(sorted(images.items())):
    photo(size, seed).save(voc / "JPEGImages" / f"{stem}.jpg", quality=92)
    class_png(size, objects).save(voc / "SegmentationClass" / f"{stem}.png")
    for split in splits:
      lists[split].append(stem)
      lists["trainval"].append(stem)
    if annotations:  # the detection side of VOC, which deeplab ignores
      (voc / "Annotations" / f"{stem}.xml").write_text(
          f"<annotation><filename>{stem}.jpg</filename><object><name>cat</name><bndbox>"
          "<xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>"
          "</annotation>")
  for name, stems in lists.items():
    text = "".join(f"{stem}\n" for stem in sorted(stems))
    (voc / "ImageSets" / "Segmentation" / f"{name}.txt").write_text(text)
    (voc / "ImageSets" / "Main" / f"{name}.txt").write_text(text)
  return voc


def rgb_class_png(size: Tuple[int, int], objects: Sequence[Tuple[int, Sequence[Tuple[int, int]]]],
                  border: int = 2) -> Image.Image:
  """The class PNG as Datumaro's VOC export writes SegmentationClass/ (and an image editor
  that flattens the palette saves it): each index painted in its VOC colour, mode RGB."""
  return Image.fromarray(voc_colormap()[np.array(class_png(size, objects, border))])


def indices(png: Path) -> np.ndarray:
  """A class PNG's palette indices, as DeepLab's remove_gt_colormap.py reads them; an RGB
  one's colours looked up in VOC's colour map, as Datumaro reads them."""
  pixels = np.array(Image.open(png))
  if pixels.ndim == 2:
    return pixels
  index = {tuple(int(c) for c in color): i for i, color in enumerate(voc_colormap())}
  return np.array([[index[tuple(int(c) for c in p)] for p in row] for row in pixels], np.uint8)
