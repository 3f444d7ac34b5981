import json
from pathlib import Path

import pytest

from gpupair.decide.pod.pod_request import PodRequestError, gpu_request

from tests.real_k8s import REAL_K8S as REAL


def pod(containers=(), init=()):
    return {"spec": {"containers": list(containers), "initContainers": list(init)}}


def c(gpus=None, field="limits", **extra):
    resources = {} if gpus is None else {field: {"nvidia.com/gpu": gpus}}
    return {"name": "c", "resources": resources, **extra}


def test_recorded_scheduler_bodies():
    body = json.loads((REAL / "cache-true-filter-01-gpu2.json").read_text())
    assert gpu_request(body["Pod"]) == 2
    body = json.loads((REAL / "cache-false-filter-02-init1-app2.json").read_text())
    assert gpu_request(body["Pod"]) == 2  # init 1, app 2: the larger wins


@pytest.mark.parametrize("spec,expected", [
    (pod([c("2"), c(1)]), 3),
    (pod([c("1")], [c("4")]), 4),  # an init container larger than the apps sets the floor
    (pod([c("2")], [c("1", restartPolicy="Always")]), 3),  # native sidecars add to the apps
    (pod([c("1")], [c("1", restartPolicy="Always"), c("2")]), 3),  # init runs beside earlier sidecars
    (pod([c()]), 0),
    (pod([c("2", field="requests")]), 2),
    (pod([c("2e0")]), 2),
])
def test_effective_request_rule(spec, expected):
    assert gpu_request(spec) == expected


@pytest.mark.parametrize("spec", [
    pod([c("1.5")]), pod([c("-1")]), pod([c("two")]), pod([c(True)]), {"spec": {"containers": "x"}},
    {"spec": {"containers": [{"resources": {"limits": ["x"]}}]}}, "pod",
])
def test_malformed_requests_are_rejected_with_a_place(spec):
    with pytest.raises(PodRequestError):
        gpu_request(spec)


def test_other_resource_names():
    assert gpu_request(pod([{"resources": {"limits": {"amd.com/gpu": 2}}}]), "amd.com/gpu") == 2
