"""cli/process.import_beam: Beam imported without the modules a conversion never uses."""
from __future__ import annotations

import subprocess
import sys

from beam_tfrecord.cli import process


def test_beam_is_imported_without_pandas_and_pymongo_which_import_later():
  code = (
      "import sys\n"
      "from beam_tfrecord.cli import process\n"
      "beam = process.import_beam()\n"
      "assert beam.Pipeline and 'apache_beam.io.filesystems' in sys.modules\n"
      "left = [m for m in process.NOT_FOR_BEAM if m in sys.modules]\n"
      "assert left == [], left\n"
      "import pandas\n"
      "assert pandas.DataFrame({'a': [1]}).shape == (1, 1)\n"
      "print('ok')\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_second_call_returns_the_module_already_imported():
  import apache_beam
  assert process.import_beam() is apache_beam
