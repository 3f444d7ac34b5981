"""Defaults of the webhook's own DRA flags, apart from webhook.claims so that `gpupair webhook
--help` (which configures the flags) loads no pydantic. The GPU DeviceClasses, which the
extender and `gpupair status` take too, are gpupair.kubewire.defaults.GPU_DEVICE_CLASSES."""

DEFAULT_GPUS_PER_NUMA_NODE = 4  # 8-GPU boards with two sockets
