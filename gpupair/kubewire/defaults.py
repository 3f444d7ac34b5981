"""Values that several commands, the injected sidecar and the manifests must agree on, each
written once. A second copy of one of these is how a changed flag silently breaks another
command (the token audience did: the reporter took --token-audience while the sidecar's token
kept a hard-coded one)."""

from __future__ import annotations

RESOURCE_NAME = "nvidia.com/gpu"  # the extended resource the device plugin advertises
# GPU shares as NVIDIA's time-slicing advertises them with renameByDefault: one a share
SHARED_RESOURCE_NAMES = ("nvidia.com/gpu.shared",)
REPORTER_PORT = 9400  # the reporter's /v1/verify, /healthz, /metrics (host network)
TOKEN_AUDIENCE = "gpupair-reporter"  # the audience of the verifier's projected token
VERIFIER_CONTAINER = "gpupair-verify"  # the sidecar the webhook injects; a pod without it gets no verdict
DRA_DRIVER = "gpu.nvidia.com"  # the DRA driver (NVIDIA's) whose ResourceSlices publish the GPUs
# The DRA DeviceClasses whose devices are GPUs: NVIDIA's driver names its class after itself
# (kubernetes-sigs/dra-driver-nvidia-gpu).
GPU_DEVICE_CLASSES = frozenset({DRA_DRIVER})
# What the dra component's webhook marks claim pods with (one, as request and limit), and what the
# GPU scheduler entry lists with ignoredByScheduler: true, so kube-scheduler asks the extender
# about them (docs/dra.md, "Which pods reach the extender").
CLAIM_POD_RESOURCE = "gpupair.io/claim"
STALE_AFTER = 300.0  # seconds after which a node's newest heartbeat is stale: the extender's and status's
