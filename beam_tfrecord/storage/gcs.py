"""The Cloud Storage client: one per process, made as Beam's GcsIO makes it (so credentials,
the emulator and retries behave as Beam's own gs:// reads), with a connection pool as large as
the read-ahead. Used for one-request image reads, the lock's conditional create, and
one-level listings."""
from __future__ import annotations

import functools

# HTTP connections kept per host by the Cloud Storage client: as many as read-ahead threads
# (shard_writer.REMOTE_READ_AHEAD) may ask at once. The default, 10, made urllib3 drop and
# reopen connections under 16 threads ("Connection pool is full").
GCS_CONNECTIONS = 32


@functools.lru_cache(maxsize=1)
def client():
  """One Cloud Storage client per process, made as Beam's GcsIO makes it."""
  # a worker's first gs:// read: one lookup, not Beam's ~30 s of retries (quiet: the
  # launcher's CLI said it once)
  check_credentials(quiet=True)
  from apache_beam.io.gcp import gcsio
  client = gcsio.GcsIO().client
  try:
    import requests.adapters
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=GCS_CONNECTIONS)
    for scheme in ("https://", "http://"):
      client._http.mount(scheme, adapter)  # the client's requests session
  except Exception:  # another transport: keep its own pooling
    pass
  return client


_CREDENTIALS_CHECKED = False
NO_CREDENTIALS = ("no Google Cloud credentials found (set GOOGLE_APPLICATION_CREDENTIALS, or run "
                  "`gcloud auth application-default login`); gs:// is read anonymously, which "
                  "works for public buckets only")


def check_credentials(quiet: bool = False) -> bool:
  """Look for Application Default Credentials once per process, before Beam does.

  Without them, Beam's own lookup retried with backoff for ~30 s and then connected
  anonymously with a logged traceback; here one lookup decides, one line says what is
  missing and how to set it, and Beam is told to connect anonymously at once (its cached
  answer, pinned by tests/cli/test_private_apis.py). True when credentials were found (or an
  emulator is configured: it takes none, so Beam connects anonymously at once; on an engine's
  workers, which the emulator's address reaches through convert-on.sh, Beam's lookup cost each
  SDK worker ~30 s)."""
  global _CREDENTIALS_CHECKED
  import os
  import sys
  if _CREDENTIALS_CHECKED:
    return True
  _CREDENTIALS_CHECKED = True
  if os.environ.get("STORAGE_EMULATOR_HOST"):
    _anonymous()
    return True
  import google.auth
  from google.auth.exceptions import DefaultCredentialsError
  try:
    google.auth.default()
    return True
  except DefaultCredentialsError:
    pass
  if not quiet:
    print(f"beam-tfrecord: {NO_CREDENTIALS}", file=sys.stderr, flush=True)
  _anonymous()
  return False


def _anonymous() -> None:
  """Beam's cached credentials set to none: its clients connect anonymously, with no lookup."""
  from apache_beam.internal.gcp import auth
  with auth._Credentials._credentials_lock:
    auth._Credentials._credentials_init, auth._Credentials._credentials = True, None
