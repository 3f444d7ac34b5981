"""`gpupair webhook`'s DRA flags, as the command line reads them."""

from __future__ import annotations

import argparse

from tests.core.command.test_cli_contract import gpupair
from gpupair.webhook import main


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.gpupair_command = "webhook"  # as gpupair.command.cli names it
    main.configure(parser)
    return parser.parse_args(list(args))


def test_the_defaults_are_nvidias_class_and_four_gpus_per_numa_node():
    args = parse()
    assert (args.gpu_device_classes, args.gpus_per_numa_node) == ({"gpu.nvidia.com"}, 4)


def test_the_variables_set_them(monkeypatch):
    monkeypatch.setenv("GPUPAIR_WEBHOOK_GPU_DEVICE_CLASSES", "gpu.nvidia.com, gpu.example.com,")
    monkeypatch.setenv("GPUPAIR_WEBHOOK_GPUS_PER_NUMA_NODE", "8")
    args = parse()
    assert (args.gpu_device_classes, args.gpus_per_numa_node) == ({"gpu.nvidia.com", "gpu.example.com"}, 8)


def test_a_numa_node_of_one_gpu_is_a_usage_error():
    done = gpupair("webhook", "--gpus-per-numa-node", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == \
        "gpupair webhook: error: --gpus-per-numa-node: must be between 2 and 16, got 1"
