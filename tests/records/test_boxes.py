"""records/boxes.py: validate, clip and normalise boxes against the real image size."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.records import boxes
from beam_tfrecord.records.model import Box, InputError, ObjectAnnotation


def _obj(x0, y0, x1, y1):
  return ObjectAnnotation(label="cat", box=Box(x0, y0, x1, y1))


def test_normalize_inside():
  n = boxes.normalize(_obj(32, 24, 160, 240), width=320, height=240)
  assert (n.xmin, n.ymin, n.xmax, n.ymax, n.clipped) == (0.1, 0.1, 0.5, 1.0, False)
  assert n.obj.label == "cat"


@settings(max_examples=200, deadline=None)
@given(w=st.integers(1, 5000), h=st.integers(1, 5000), data=st.data())
def test_normalize_matches_division(w, h, data):
  x0 = data.draw(st.floats(0, w - 0.01, allow_subnormal=False))
  x1 = data.draw(st.floats(x0 + 0.005, w))
  y0 = data.draw(st.floats(0, h - 0.01, allow_subnormal=False))
  y1 = data.draw(st.floats(y0 + 0.005, h))
  n = boxes.normalize(_obj(x0, y0, x1, y1), w, h, "error")
  assert (n.xmin, n.ymin, n.xmax, n.ymax) == (x0 / w, y0 / h, x1 / w, y1 / h)
  assert 0.0 <= n.xmin < n.xmax <= 1.0 and 0.0 <= n.ymin < n.ymax <= 1.0
  assert not n.clipped


def test_normalize_clips_partly_outside():
  n = boxes.normalize(_obj(-10, 20, 120, 90), width=100, height=80)
  assert (n.xmin, n.ymin, n.xmax, n.ymax, n.clipped) == (0.0, 0.25, 1.0, 1.0, True)
  for policy in ("drop", "error"):
    with pytest.raises(InputError) as e:
      boxes.normalize(_obj(-10, 20, 120, 90), 100, 80, policy)
    assert e.value.reason == "bbox_partly_outside" and e.value.stage == "validate"


@pytest.mark.parametrize("box,reason", [
    ((float("nan"), 0, 10, 10), "bbox_not_finite"),
    ((0, 0, float("inf"), 10), "bbox_not_finite"),
    ((10, 0, 10, 10), "bbox_empty"),
    ((0, 10, 10, 5), "bbox_empty"),
    ((100, 0, 150, 10), "bbox_outside"),
    ((-20, -20, 0, 0), "bbox_outside"),
    ((0, 80, 10, 90), "bbox_outside"),
])
@pytest.mark.parametrize("policy", boxes.BBOX_POLICIES)
def test_normalize_always_rejected(box, reason, policy):
  with pytest.raises(InputError) as e:
    boxes.normalize(_obj(*box), 100, 80, policy)
  assert e.value.reason == reason
