"""records/masks.py's class masks (the deeplab schema): painting objects in order, a source's
class PNG taken as it is (VOC's palette PNGs, written as VOC writes them) and its checks."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from voc_segmentation import class_png, rgb_class_png, voc_colormap

from beam_tfrecord.records import masks
from beam_tfrecord.records.model import InputError


def _png(image: Image.Image) -> bytes:
  out = io.BytesIO()
  image.save(out, format="PNG")
  return out.getvalue()


def test_paint_puts_later_layers_over_earlier_ones():
  a = np.zeros((4, 6), np.uint8)
  a[0:3, 0:4] = 1
  b = np.zeros((4, 6), np.uint8)
  b[1:4, 2:6] = 1
  canvas = masks.paint(iter([(a, 7), (b, masks.IGNORE)]), 6, 4)
  expected = np.zeros((4, 6), np.uint8)
  expected[0:3, 0:4] = 7
  expected[1:4, 2:6] = 255
  np.testing.assert_array_equal(canvas, expected)
  np.testing.assert_array_equal(masks.paint(iter([(b, masks.IGNORE), (a, 7)]), 6, 4)[1, 2], 7)
  assert not masks.paint([], 6, 4).any()


def test_class_mask_is_a_grayscale_png_of_the_values():
  canvas = np.array([[0, 3, 3], [255, 0, 12]], np.uint8)
  made = masks.class_mask(canvas)
  assert made.values == (0, 3, 12, 255)
  with Image.open(io.BytesIO(made.png)) as decoded:
    assert (decoded.format, decoded.mode, decoded.size) == ("PNG", "L", (3, 2))
    np.testing.assert_array_equal(np.asarray(decoded), canvas)


def test_a_voc_palette_png_is_read_as_its_indices():
  """VOC's SegmentationClass PNG: mode P with VOC's colour map; the indices, not colours."""
  image = class_png((20, 10), [(15, [(2, 2), (17, 2), (17, 8), (2, 8)])])
  data = _png(image)
  opened = masks.open_class_png(data)
  assert opened.size == (20, 10)
  array = masks.class_array(opened)
  np.testing.assert_array_equal(array, np.asarray(image))
  assert set(np.unique(array)) == {0, 15, 255}
  assert tuple(voc_colormap()[255]) == (224, 224, 192)  # VOC's void colour


def test_voc_s_colour_map_is_the_devkit_s():
  np.testing.assert_array_equal(masks.voc_colormap(), voc_colormap())


def test_an_rgb_png_in_voc_s_colours_is_read_as_its_indices():
  """Datumaro's VOC export (and an editor that flattens the palette) saves the class PNG as
  RGB in VOC's colours: each colour is read back as its index, void (224, 224, 192) as 255;
  an opaque RGBA alike."""
  objects = [(15, [(2, 2), (17, 2), (17, 8), (2, 8)]), (200, [(1, 9), (6, 1), (9, 9)])]
  indices = np.asarray(class_png((20, 10), objects))
  for image in (rgb_class_png((20, 10), objects), rgb_class_png((20, 10), objects)
                .convert("RGBA")):
    opened = masks.open_class_png(_png(image))
    np.testing.assert_array_equal(masks.class_array(opened), indices)
  assert set(np.unique(indices)) == {0, 15, 200, 255}


def test_rgb_colours_outside_voc_s_map_and_transparency_are_refused():
  image = rgb_class_png((20, 10), [(15, [(2, 2), (17, 2), (17, 8), (2, 8)])])
  image.putpixel((0, 0), (13, 200, 7))
  image.putpixel((1, 0), (13, 200, 8))
  with pytest.raises(InputError) as raised:
    masks.class_array(masks.open_class_png(_png(image)))
  assert raised.value.reason == "bad_class_mask"
  assert "2 colours outside VOC's colour map ((13, 200, 7), (13, 200, 8))" in \
      raised.value.message
  clear = rgb_class_png((4, 4), []).convert("RGBA")
  clear.putpixel((0, 0), (0, 0, 0, 0))
  with pytest.raises(InputError) as raised:
    masks.class_array(masks.open_class_png(_png(clear)))
  assert raised.value.reason == "bad_class_mask" and "transparent" in raised.value.message


def test_a_carried_class_png_round_trips_and_segmentations_are_not_one():
  data = _png(class_png((8, 8), []))
  assert masks.carried_class_png(masks.class_png_json(data)) == data
  assert masks.carried_class_png(masks.to_json([[1, 2, 3, 4, 5, 6]])) is None
  assert masks.carried_class_png(masks.to_json({"size": [2, 2], "counts": [4]})) is None
  assert masks.carried_class_png(None) is None


@pytest.mark.parametrize("image,words", [
    (Image.new("LA", (4, 4)), "mode LA"),
    (Image.new("I;16", (4, 4)), "mode I;16"),
])
def test_class_pngs_that_are_not_single_channel_8_bit_are_refused(image, words):
  with pytest.raises(InputError) as raised:
    masks.open_class_png(_png(image))
  assert raised.value.reason == "bad_class_mask" and words in raised.value.message


def test_unreadable_class_pngs_are_refused():
  with pytest.raises(InputError) as raised:
    masks.open_class_png(b"not a png")
  assert raised.value.reason == "bad_class_mask"
  whole = _png(class_png((64, 64), [(3, [(1, 1), (60, 5), (30, 60)])]))
  with pytest.raises(InputError) as raised:
    masks.class_array(masks.open_class_png(whole[:len(whole) // 2]))
  assert raised.value.reason == "bad_class_mask"
  jpeg = io.BytesIO()
  Image.new("L", (4, 4)).save(jpeg, format="JPEG")
  with pytest.raises(InputError) as raised:
    masks.open_class_png(jpeg.getvalue())
  assert "JPEG" in raised.value.message


def test_values_must_be_background_ignore_or_ids():
  canvas = np.array([[0, 1, 255], [2, 2, 0]], np.uint8)
  masks.check_class_values(canvas, [1, 2, 3])
  with pytest.raises(InputError) as raised:
    masks.check_class_values(canvas, [1])
  assert raised.value.reason == "unknown_class_index"
  assert "holds 2, which is no class" in raised.value.message
