"""What a pod asking MIG profiles takes of a GPU: the device plugin's ``mig.strategy: mixed``
resources (``nvidia.com/mig-3g.20gb``), counted in compute slices.

A pod asking ``nvidia.com/mig-3g.20gb`` takes 3 of an A100's 7 compute slices, whatever its
memory, so it is sized as a share of one GPU: 3 x 1000 / 7 milli, as the reporter counts the
GPU's slices (gpupair/topology/mig_slices.py). Several profiles in one pod are summed, one share
of one GPU, as FGD's ``gpu_milli`` writes a pod (one GPU at most). The fragmentation score (the
extender's and, through the learned workload, the simulator's) and ``snapshot`` size it with
these two functions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpupair.decide.pod.pod_request import gpu_request
from gpupair.topology.mig_slices import profile_slices
from gpupair.topology.shares import MILLI


def mig_slices_asked(pod: Mapping[str, Any], skip: Collection[str] = ()) -> int:
    """The compute slices of the MIG profiles ``pod`` asks, summed over its profiles (0: none);
    ``skip``: resources read otherwise (the whole-GPU and share resources). PodRequestError for
    a quantity that cannot be read."""
    spec = pod.get("spec")
    names: set[str] = set()
    for field_name in ("containers", "initContainers"):
        containers = spec.get(field_name) if isinstance(spec, Mapping) else None
        for container in containers if isinstance(containers, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            for kind in ("requests", "limits"):
                table = resources.get(kind) if isinstance(resources, Mapping) else None
                names.update(table if isinstance(table, Mapping) else ())
    return sum(gpu_request(pod, name) * slices for name in sorted(names - set(skip))
               if (slices := profile_slices(name)) is not None)


def slices_milli(slices: int, gpu_slices: int) -> int:
    """``slices`` of a GPU of ``gpu_slices`` compute slices, in thousandths of a GPU, rounded
    down as the reporter's share left is (GpuShares.milli_left), so a GPU with ``s`` slices left
    holds the share exactly when ``s >= slices``; at most one GPU."""
    return min(MILLI, MILLI * slices // max(gpu_slices, 1))
