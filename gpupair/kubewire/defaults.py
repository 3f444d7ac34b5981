"""Values that several commands, the injected sidecar and the manifests must agree on, each
written once. A second copy of one of these is how a changed flag silently breaks another
command (the token audience did: the reporter took --token-audience while the sidecar's token
kept a hard-coded one)."""

from __future__ import annotations

RESOURCE_NAME = "nvidia.com/gpu"  # the extended resource the device plugin advertises
# kube-scheduler's own: an extender scores 0..MaxExtenderPriority (extender/v1 types.go), a plugin
# 0..MaxNodeScore (framework); requests a container leaves unset count as these when it scores
# (pkg/scheduler/util DefaultMilliCPURequest, DefaultMemoryRequest)
MAX_EXTENDER_PRIORITY = 10
MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST_MIB = 200
# GPU shares as NVIDIA's time-slicing advertises them with renameByDefault: one a share
SHARED_RESOURCE_NAMES = ("nvidia.com/gpu.shared",)
# MIG devices as NVIDIA's device plugin advertises them under mig.strategy mixed: one resource a
# profile, "nvidia.com/mig-3g.20gb"; the profile's "<n>g" is its compute slices
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
REPORTER_PORT = 9400  # the reporter's /v1/verify, /healthz, /metrics (host network)
TOKEN_AUDIENCE = "gpupair-reporter"  # the audience of the verifier's projected token
VERIFIER_CONTAINER = "gpupair-verify"  # the sidecar the webhook injects; a pod without it gets no verdict
DRA_DRIVER = "gpu.nvidia.com"  # the DRA driver (NVIDIA's) whose ResourceSlices publish the GPUs
# The DRA DeviceClasses whose devices are GPUs: NVIDIA's driver names its class after itself
# (kubernetes-sigs/dra-driver-nvidia-gpu).
GPU_DEVICE_CLASSES = frozenset({DRA_DRIVER})
# What the dra component's webhook marks claim pods with (zero, as request and limit), and what the
# GPU scheduler entry lists with ignoredByScheduler: true, so kube-scheduler asks the extender
# about them (docs/dra.md, "Which pods reach the extender").
CLAIM_POD_RESOURCE = "gpupair.io/claim"
STALE_AFTER = 300.0  # seconds after which a node's newest heartbeat is stale: the extender's and status's
