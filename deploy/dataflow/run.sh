#!/usr/bin/env bash
# Launch a conversion from the Flex Template built by build.sh.
#
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket \
#   SERVICE_ACCOUNT=beam-tfrecord@my-project.iam.gserviceaccount.com \
#   bash deploy/dataflow/run.sh \
#     format=coco \
#     "input=train=gs://my-bucket/coco/annotations/instances_train2017.json;val=gs://my-bucket/coco/annotations/instances_val2017.json" \
#     "images=train=gs://my-bucket/coco/train2017;val=gs://my-bucket/coco/val2017" \
#     output=gs://my-bucket/tfrecords/coco2017 shard_size_mb=200
#
# Each argument is one template parameter NAME=VALUE (names: deploy/dataflow/metadata.json,
# i.e. the CLI options with _ for -). Values may contain ',' and '=' but not '~'.
# Environment: PROJECT, REGION, BUCKET (required); SERVICE_ACCOUNT (worker service account;
# default: the Compute Engine default account), TAG, TEMPLATE, WORKER_IMAGE (as in build.sh;
# WORKER_IMAGE=none runs on Beam's stock image and installs the package at worker start),
# MACHINE_TYPE (n2-standard-4), MAX_WORKERS (10), JOB_NAME (beam-tfrecord-DATE),
# DRY_RUN=1 (print the gcloud command only).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
: "${PROJECT:?set PROJECT}" "${REGION:?set REGION}" "${BUCKET:?set BUCKET (name, without gs://)}"
[ "$#" -gt 0 ] || { echo "usage: run.sh NAME=VALUE ... (template parameters)" >&2; exit 2; }
REPO="${REPO:-beam-tfrecord}"
TAG="${TAG:-$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$ROOT/beam_tfrecord/__init__.py")}"
TEMPLATE="${TEMPLATE:-gs://$BUCKET/templates/beam-tfrecord-$TAG.json}"
WORKER_IMAGE="${WORKER_IMAGE:-$REGION-docker.pkg.dev/$PROJECT/$REPO/beam-tfrecord-worker:$TAG}"
JOB_NAME="${JOB_NAME:-beam-tfrecord-$(date -u +%Y%m%d-%H%M%S)}"

params=""
for kv in "$@"; do
  case "$kv" in *=*) ;; *) echo "run.sh: '$kv' is not NAME=VALUE" >&2; exit 2 ;; esac
  case "$kv" in *"~"*) echo "run.sh: '~' is not allowed in a value: $kv" >&2; exit 2 ;; esac
  params="${params:+$params~}$kv"
done

cmd=(gcloud dataflow flex-template run "$JOB_NAME"
  --project "$PROJECT" --region "$REGION"
  --template-file-gcs-location "$TEMPLATE"
  --temp-location "gs://$BUCKET/dataflow/tmp"
  --staging-location "gs://$BUCKET/dataflow/staging"
  --worker-machine-type "${MACHINE_TYPE:-n2-standard-4}"
  --max-workers "${MAX_WORKERS:-10}"
  "--parameters=^~^$params")
if [ -n "${SERVICE_ACCOUNT:-}" ]; then cmd+=(--service-account-email "$SERVICE_ACCOUNT"); fi
if [ "$WORKER_IMAGE" != none ]; then
  cmd+=("--additional-pipeline-options=sdk_container_image=$WORKER_IMAGE")
fi

if [ -n "${DRY_RUN:-}" ]; then printf '%q ' "${cmd[@]}"; printf '\n'; exit 0; fi
"${cmd[@]}"
echo "watch: https://console.cloud.google.com/dataflow/jobs?project=$PROJECT (job $JOB_NAME)"
echo "   or: gcloud dataflow jobs list --project $PROJECT --region $REGION --filter=name=$JOB_NAME"
