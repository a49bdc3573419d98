"""records/plain.py: dataclass records <-> plain tuples, by converters written per record."""
from __future__ import annotations

import dataclasses
import marshal
import pickle
from typing import Optional, Tuple

import pytest

from beam_tfrecord.records import plain
from beam_tfrecord.records.model import Box


@dataclasses.dataclass(frozen=True)
class Checked:  # a __post_init__: rebuilt through __init__, which runs it
  value: int

  def __post_init__(self):
    if self.value < 0:
      raise ValueError("negative")


@dataclasses.dataclass(frozen=True)
class Item:
  name: str
  box: Box
  checked: Optional[Checked] = None
  points: Optional[Tuple[float, ...]] = None


@dataclasses.dataclass(frozen=True)
class Record:
  items: Tuple[Item, ...] = ()
  tags: Tuple[str, ...] = ()
  nested: Tuple[Tuple[Item, ...], ...] = ()


def test_plain_tuples_nest_and_round_trip():
  item = Item("a", Box(1, 2, 3, 4), Checked(5), [0.5, 1.0])  # a list where a tuple is declared
  record = Record((item, Item("b", Box(0, 0, 1, 1, True))), ["x"], ((item,), ()))
  to, back = plain.record_converters(Record)
  values = to(record)
  assert values == ((("a", (1, 2, 3, 4, False), (5,), (0.5, 1.0)),
                     ("b", (0, 0, 1, 1, True), None, None)), ("x",),
                    ((("a", (1, 2, 3, 4, False), (5,), (0.5, 1.0)),), ()))
  again = back(marshal.loads(marshal.dumps(values)))
  assert again == dataclasses.replace(record, items=(
      dataclasses.replace(item, points=(0.5, 1.0)), record.items[1]), tags=("x",),
      nested=((dataclasses.replace(item, points=(0.5, 1.0)),), ()))
  # fields in declaration order, as __init__ sets them: equal pickles
  assert pickle.dumps(again) == pickle.dumps(Record(*again.__dict__.values()))
  assert list(again.items[0].box.__dict__) == ["xmin", "ymin", "xmax", "ymax", "normalized"]


def test_a_record_with_post_init_is_rebuilt_through_it():
  _, back = plain.record_converters(Item)
  try:
    back(("a", (0, 0, 1, 1, False), (-1,), None))
  except ValueError as e:
    assert str(e) == "negative"
  else:
    raise AssertionError("__post_init__ did not run")


def test_maker_builds_the_record_init_would():
  make = plain.maker(Item)
  made = make("a", Box(0, 0, 1, 1), points=(1.0,))
  assert made == Item("a", Box(0, 0, 1, 1), points=(1.0,))
  assert pickle.dumps(made) == pickle.dumps(Item("a", Box(0, 0, 1, 1), points=(1.0,)))
  with pytest.raises(TypeError, match="box"):  # a missing field
    make(name="a")
  assert plain.maker(Checked) is Checked  # its __post_init__ must run


def test_tuple_maker_gives_the_tuple_of_the_record_init_would_make():
  """plain.tuple_maker: the record's plain tuple straight from __init__'s arguments (nested
  records given as their tuples), defaults included; field_names says which index is which."""
  to, back = plain.record_converters(Item)
  make_box, make_item = plain.tuple_maker(Box), plain.tuple_maker(Item)
  made = make_item("a", make_box(0, 0, 1, 1), points=(1.0,))
  assert made == to(Item("a", Box(0, 0, 1, 1), points=(1.0,))) == (
      "a", (0, 0, 1, 1, False), None, (1.0,))
  assert back(made) == Item("a", Box(0, 0, 1, 1), points=(1.0,))
  assert plain.field_names(Item) == ("name", "box", "checked", "points")
  with pytest.raises(TypeError, match="box"):
    make_item(name="a")
