"""records/protos.py: tf.train.Example and StringIntLabelMap without TensorFlow, and the direct
Example encoder (ExampleLayout): byte for byte what protobuf and TensorFlow write."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.records import protos

KEYS = ["image/encoded", "a", "é/x", "image/object/area", "z" * 200]

_values = st.one_of(
    st.tuples(st.just(protos.BYTES), st.lists(st.binary(max_size=300), max_size=5)),
    st.tuples(st.just(protos.FLOATS), st.lists(st.floats(width=64), max_size=6)),
    st.tuples(st.just(protos.INTS), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6)),
    st.tuples(st.just(protos.INTS), st.lists(st.integers(0, 200), max_size=200)),
)


@settings(max_examples=300, deadline=None)
@given(features=st.dictionaries(st.sampled_from(KEYS), _values, max_size=len(KEYS)))
def test_example_layout_gives_protobufs_deterministic_bytes(features):
  """Every kind, empty lists, NaN/inf and values beyond float32 (which take protobuf's path),
  multi-byte lengths and keys: the direct encoder must equal protobuf byte for byte."""
  layout = protos.ExampleLayout(KEYS)
  assert layout.serialize(features) == protos.serialize_slow(features)


def test_example_layout_matches_tensorflow():
  tf = pytest.importorskip("tensorflow")
  features = {"s": (protos.BYTES, [b"", "é".encode()]), "f": (protos.FLOATS, [0.1, -2.5]),
              "i": (protos.INTS, [0, -1, 2**40]), "e": (protos.FLOATS, [])}
  theirs = tf.train.Example(features=tf.train.Features(feature={
      "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"", "é".encode()])),
      "f": tf.train.Feature(float_list=tf.train.FloatList(value=[0.1, -2.5])),
      "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[0, -1, 2**40])),
      "e": tf.train.Feature(float_list=tf.train.FloatList(value=[]))}))
  assert protos.ExampleLayout(features).serialize(features) == \
      theirs.SerializeToString(deterministic=True)


def test_protos_example_matches_tensorflow_for_every_value_kind():
  tf = pytest.importorskip("tensorflow")
  values = {"s": [b"", b"\x00\xff", "é".encode()], "f": [0.0, -1.5, 3.4e38, 1e-45],
            "i": [0, -1, 2**63 - 1, -(2**63)], "empty": []}
  ours = protos.Example(features=protos.Features(feature={
      "s": protos.Feature(bytes_list={"value": values["s"]}),
      "f": protos.Feature(float_list={"value": values["f"]}),
      "i": protos.Feature(int64_list={"value": values["i"]}),
      "empty": protos.Feature(int64_list={"value": []}),
  }))
  theirs = tf.train.Example(features=tf.train.Features(feature={
      "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=values["s"])),
      "f": tf.train.Feature(float_list=tf.train.FloatList(value=values["f"])),
      "i": tf.train.Feature(int64_list=tf.train.Int64List(value=values["i"])),
      "empty": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
  }))
  assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)


def test_string_int_label_map_message():
  message = protos.StringIntLabelMap()
  message.item.add(name="cat", id=17, display_name="Cat")
  again = protos.StringIntLabelMap.FromString(message.SerializeToString())
  assert [(i.name, i.id, i.display_name) for i in again.item] == [("cat", 17, "Cat")]


@pytest.mark.parametrize("values", [
    [float("inf"), float("-inf")], [float("nan"), 1.0], [1e308, 1e308], [-1e39, 1e39],
    [3.4e38, 3.4e38], [10**400, -(10**400)], [10**400, 1.0], [2, -0.0, 1e-45]])
def test_float_lists_the_fast_path_refuses_go_through_protobuf(values):
  """The fast path packs a float list whose sum is finite (the values then are): lists with
  non-finite values, values beyond float32 or a sum that overflows must equal protobuf's."""
  features = {"f": (protos.FLOATS, values), "g": (protos.FLOATS, values[:1])}
  assert _outcome(protos.ExampleLayout(features).serialize, features) == \
      _outcome(protos.serialize_slow, features)


def _outcome(serialize, features):
  """The bytes, or the type of the exception (protobuf refuses ints beyond a double)."""
  try:
    return serialize(features)
  except Exception as e:
    return type(e)


@pytest.mark.parametrize("values", [[0], [127], [128], [-1], [True], [2**63 - 1], [-(2**63)],
                                    [5, 127, 0], [5, 300], [2**63], [-(2**63) - 1]])
def test_int_lists_of_one_byte_values_and_others(values):
  features = {"i": (protos.INTS, values)}
  assert _outcome(protos.ExampleLayout(features).serialize, features) == \
      _outcome(protos.serialize_slow, features)
