"""Private APIs of other libraries that this project still uses, one pinned test each: when an
upgrade removes or changes one, this names it instead of a conversion failing later."""
from __future__ import annotations

import argparse


def test_beam_argument_parser_knows_beam_options():
  """cli/beam_options._beam_parser builds on Beam's _BeamArgumentParser (what PipelineOptions
  parses with) to tell Beam's options from unknown ones."""
  from apache_beam.options.pipeline_options import _BeamArgumentParser

  from beam_tfrecord.cli import beam_options
  assert issubclass(_BeamArgumentParser, argparse.ArgumentParser)
  _, unknown = beam_options._beam_parser().parse_known_args(
      ["--runner=DataflowRunner", "--direct_num_workers=2", "--no-such-option=1"])
  assert unknown == ["--no-such-option=1"]


def test_argparse_append_action():
  """deploy/dataflow/flex_main.py splits ';'-separated template values of repeatable options,
  which it recognises as argparse._AppendAction."""
  from beam_tfrecord import cli
  repeatable = {a.dest for a in cli.convert_options() if isinstance(a, argparse._AppendAction)}
  assert repeatable == {"inputs", "images"}


def test_storage_client_has_a_requests_session():
  """storage/gcs.py widens the Cloud Storage client's connection pool through its requests
  session (client._http)."""
  import requests
  from google.auth.credentials import AnonymousCredentials
  from google.cloud import storage
  client = storage.Client(project="pinned", credentials=AnonymousCredentials())
  assert isinstance(client._http, requests.Session)
  assert callable(client._http.mount)


def test_our_deprecation_warnings_are_errors():
  """pytest.ini: a DeprecationWarning raised in this project's code fails the test that
  triggers it; other libraries' are ignored (they are theirs to fix)."""
  import warnings

  import pytest
  with pytest.raises(DeprecationWarning):
    warnings.warn_explicit("old call", DeprecationWarning, "x.py", 1,
                           module="beam_tfrecord.storage.files")
  warnings.warn_explicit("their old call", DeprecationWarning, "y.py", 1,
                         module="apache_beam.io.filesystems")


def test_beam_credentials_cache_can_be_set_to_anonymous():
  """storage/gcs.check_credentials tells Beam to connect anonymously at once by setting its
  cached answer (_Credentials._credentials_init / _credentials under _credentials_lock)."""
  from apache_beam.internal.gcp import auth
  assert hasattr(auth._Credentials, "_credentials_lock")
  assert {"_credentials_init", "_credentials"} <= set(vars(auth._Credentials))
