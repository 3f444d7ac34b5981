"""Defaults of the webhook's DRA flags, apart from webhook.claims so that `gpupair webhook
--help` (which configures the flags) loads no pydantic."""

DEFAULT_GPU_DEVICE_CLASSES = ("gpu.nvidia.com",)  # NVIDIA's DRA driver's class (kubernetes-sigs/dra-driver-nvidia-gpu)
DEFAULT_GPUS_PER_NUMA_NODE = 4  # 8-GPU boards with two sockets
