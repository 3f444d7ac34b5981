"""Generated bindings for the kubelet PodResources v1 gRPC API (see api.proto, generate.sh)."""
