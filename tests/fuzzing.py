"""What the property tests share: a function returns a result or raises InputError, never
anything else, whatever the input. (The pipeline turns InputError into an error record; any
other exception either kills the job or becomes a vague `unexpected_error`.)

Used by the property tests beside each module's other tests (tests/sources/test_coco_fuzz.py,
test_voc.py, test_csv.py, tests/write/test_images.py, test_encode.py, tests/storage/test_paths.py).
"""
from __future__ import annotations

from hypothesis import HealthCheck, settings

from beam_tfrecord.records.model import InputError

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def returns_or_input_error(fn, *args, **kwargs):
  """fn(*args) or None when it raised InputError; any other exception fails the test."""
  try:
    return fn(*args, **kwargs)
  except InputError as e:
    assert e.stage and e.reason and isinstance(e.message, str)
    return None
