#!/bin/sh
# Regenerates api_pb2.py, api_pb2.pyi and api_pb2_grpc.py from api.proto.
# Run from anywhere; needs grpcio-tools (pip install -e '.[dev]').
# The include root is the repository root, so the generated gRPC module imports
# "from reporter.podresources import api_pb2"; the package installs as gpupair.reporter
# (pyproject.toml's package-dir), so that import is rewritten after generating.
# After regenerating, check the "protobuf>=" pin in pyproject.toml against the
# ValidateProtobufRuntimeVersion line in api_pb2.py, and grpcio against GRPC_GENERATED_VERSION.
set -eu
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
"$PYTHON" -m grpc_tools.protoc \
    -I. \
    --python_out=. \
    --pyi_out=. \
    --grpc_python_out=. \
    reporter/podresources/api.proto
sed -i 's/^from reporter\.podresources import/from gpupair.reporter.podresources import/' reporter/podresources/api_pb2_grpc.py
