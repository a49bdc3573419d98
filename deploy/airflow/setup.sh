#!/usr/bin/env bash
# Create Airflow's own virtualenv in deploy/airflow/.venv (kept apart from the project's .venv:
# Airflow pins its own versions of many libraries). The pipeline itself runs in the project's
# interpreter (BEAM_TFRECORD_PYTHON, default <repo>/.venv/bin/python), not in this venv.
#
#   bash deploy/airflow/setup.sh            install the pinned set from requirements.txt
#   bash deploy/airflow/setup.sh --resolve  resolve the top-level packages afresh and re-pin
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${AIRFLOW_VENV:-$HERE/.venv}"
TOP=("apache-airflow==3.3.2" "apache-airflow-providers-apache-beam[google]==6.3.1"
     "apache-airflow-providers-google")

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
if [ "${1:-}" = "--resolve" ] || [ ! -s "$HERE/requirements.txt" ]; then
  "$VENV/bin/python" -m pip install --quiet "${TOP[@]}"
  {
    echo "# Airflow venv for deploy/airflow, pinned from what pip resolved for:"
    echo "#   ${TOP[*]}"
    echo "# Re-pin with: bash deploy/airflow/setup.sh --resolve"
    "$VENV/bin/python" -m pip freeze --exclude-editable | grep -v '^pip=='
  } > "$HERE/requirements.txt"
else
  "$VENV/bin/python" -m pip install --quiet -r "$HERE/requirements.txt"
fi
"$VENV/bin/python" -c "import airflow, airflow.providers.apache.beam, airflow.providers.google; print('airflow', airflow.__version__)"
