#!/bin/bash
# kubectl_standin.sh — a stand-in for kubectl in tests without a cluster (placed first on PATH
# as `kubectl`). It answers the calls ptd makes from files in $PTD_KUBECTL_DIR, which the
# test fills as the cluster would change: pods.json is the answer to `kubectl get pods -o json`
# (samples in tests/data/k8s/pods/, in the shape of the Kubernetes v1 Pod API), logs/POD
# the answer to `kubectl logs POD`. Every call is appended to $PTD_KUBECTL_DIR/calls.
set -u
dir=${PTD_KUBECTL_DIR:?the folder of the stand-in cluster}
echo "$*" >> "$dir/calls"
case "${1:-}" in
apply)
  [ "${2:-}" = -f ] || { echo "error: must specify -f" >&2; exit 1; }
  name=$(sed -n 's/^  name: //p' "$3" | head -1)
  echo "jobset.jobset.x-k8s.io/$name created"
  ;;
get)
  [ "${2:-}" = pods ] || { echo "error: the stand-in lists pods only" >&2; exit 1; }
  if [ -f "$dir/pods.json" ]; then cat "$dir/pods.json"
  else echo '{"apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""}}'; fi
  ;;
logs)
  pod=${2:-}
  if [ -f "$dir/logs/$pod" ]; then cat "$dir/logs/$pod"
  else echo "Error from server (NotFound): pods \"$pod\" not found" >&2; exit 1; fi
  ;;
create)
  [ "${2:-} ${3:-}" = "secret generic" ] || { echo "error: the stand-in creates generic secrets only" >&2; exit 1; }
  case "${5:-}" in --from-file=PTD_RUN_SECRET=*) cp "${5#--from-file=PTD_RUN_SECRET=}" "$dir/secret-$4" ;; esac
  echo "secret/$4 created"
  ;;
delete)
  if [ "${2:-}" = secret ]; then rm -f "$dir/secret-${3:-}"; echo "secret \"${3:-}\" deleted"; exit 0; fi
  [ "${2:-}" = jobsets.jobset.x-k8s.io ] || { echo "error: the stand-in deletes JobSets and secrets only" >&2; exit 1; }
  echo "jobset.jobset.x-k8s.io \"${3:-}\" deleted"
  rm -f "$dir/pods.json"  # the JobSet controller's garbage collection: its pods go
  ;;
*)
  echo "error: unknown command \"${1:-}\" for the kubectl stand-in" >&2
  exit 1
  ;;
esac
