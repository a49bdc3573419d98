"""records/coders.py: the compact, deterministic coder of the dataclasses that cross shuffles."""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from conftest import SAMPLE_ANNOTATION as ANN

from beam_tfrecord.records import coders
from beam_tfrecord.records.model import Box, ImageAnnotation


def test_dataclass_coder_round_trips_and_is_compact():
  coder = coders.DataclassCoder(ImageAnnotation)
  encoded = coder.encode(ANN)
  assert coder.decode(encoded) == ANN
  assert coder.encode(coder.decode(encoded)) == encoded  # deterministic
  import pickle
  assert len(encoded) < len(pickle.dumps(ANN)) / 2
  assert coder.is_deterministic()
  again = pickle.loads(pickle.dumps(coder))  # how Beam ships coders to workers
  assert again.decode(encoded) == ANN
  # what Beam's runners call: the coder's impl, which must be this coder's encoding (an
  # attribute named _impl once made Beam pickle every record through a primitives coder)
  for made in (coder, again):
    assert made.get_impl().encode(ANN) == encoded
    assert made.get_impl().decode(encoded) == ANN


@dataclasses.dataclass(frozen=True)
class Mask:
  png: bytes
  score: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Obj:  # ObjectAnnotation as it may grow: a nested optional record
  label: str
  box: Box
  mask: Optional[Mask] = None


@dataclasses.dataclass(frozen=True)
class Image:  # ImageAnnotation as it may grow
  key: str
  objects: Tuple[Obj, ...] = ()
  labels: Tuple[str, ...] = ()
  masks: Tuple[Mask, ...] = ()
  width: Optional[int] = None


def test_dataclass_coder_follows_new_fields():
  """Other work adds fields to the records (image labels, masks): the coder takes them from
  the dataclass, nested records and tuples of them included."""
  value = Image(key="k", labels=("cat", "indoor"),
                masks=(Mask(b"\x89PNG", 0.5),),
                objects=(Obj("cat", Box(0, 0, 1, 1), mask=Mask(b"x")), Obj("dog", Box(1, 1, 2, 2))))
  coder = coders.DataclassCoder(Image)
  decoded = coder.decode(coder.encode(value))
  assert decoded == value
  assert isinstance(decoded.objects[0].box, Box) and isinstance(decoded.masks[0], Mask)


def test_error_messages_carry_no_object_addresses():
  """Issue 30 (minor): an exception text with an object repr made errors-*.jsonl differ
  between identical runs; every ErrorRecord drops the address, whatever module made it."""
  from beam_tfrecord.records.model import ErrorRecord
  made = [ErrorRecord(source="s", stage="parse", reason="unreadable", key="k", message=(
      f"OSError: cannot read <_io.BytesIO object at 0x7f{n:x}a0> or <Foo object at 0x{n}>"))
      for n in (0x1234, 0x99)]
  assert made[0].to_json() == made[1].to_json()
  assert made[0].message == "OSError: cannot read <_io.BytesIO object> or <Foo object>"
