"""The every-pod entry's verb, POST /prioritize-every-pod (extender/every_pod.py): the pods the GPU
entry never sees are scored as prioritize scores them; a pod the GPU entry manages gets 0 on
every node, so kube-scheduler, which adds both entries' answers, scores it once. Its requests
are counted apart from the GPU entry's."""

from __future__ import annotations

import copy

import pytest

from gpupair.extender.every_pod import EVERY_POD_VERB, gpu_entry_resources, managed
from gpupair.kubewire.defaults import CLAIM_POD_RESOURCE
from tests.controlplane.faults import metric_total
from tests.extender.test_fragmentation_score import roomy_and_tight, with_cpu
from tests.extender_support import args_body, eventually, host_scores, kube_extender, make_extender, pod_object, serving
from tests.kube_double import running_kube_double

GPU_ENTRY = gpu_entry_resources("nvidia.com/gpu")


def asking(where: str, kind: str, resource: str) -> dict:
    """A CPU pod that asks one ``resource`` in its first container or a new init container."""
    pod = pod_object(0)
    container = pod["spec"]["containers"][0]
    if where == "initContainers":
        container = copy.deepcopy(container)
        container["name"] = "setup"
        pod["spec"]["initContainers"] = [container]
    container.setdefault("resources", {}).setdefault(kind, {})[resource] = "1"
    return pod


@pytest.mark.parametrize("where", ["containers", "initContainers"])
@pytest.mark.parametrize("kind", ["requests", "limits"])
@pytest.mark.parametrize("resource", ["nvidia.com/gpu", CLAIM_POD_RESOURCE])
def test_a_pod_asking_a_managed_resource_anywhere_kube_scheduler_looks_is_the_gpu_entrys(where, kind, resource):
    assert managed(asking(where, kind, resource), GPU_ENTRY)


def test_what_kube_scheduler_does_not_read_leaves_a_pod_to_the_every_pod_entry():
    ephemeral = pod_object(0)
    ephemeral["spec"]["ephemeralContainers"] = [{"name": "debug", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    pod_level = pod_object(0)
    pod_level["spec"]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    other = asking("containers", "limits", "nvidia.com/gpu.shared")
    for pod in (pod_object(0), ephemeral, pod_level, other, {"spec": None}, {}):
        assert not managed(pod, GPU_ENTRY)


async def test_cpu_pods_are_scored_and_gpu_pods_left_to_the_gpu_entry():
    async with running_kube_double() as double:
        roomy_and_tight(double)
        names = ["roomy", "tight"]
        async with kube_extender(double, fragmentation=True) as k:
            await eventually(lambda: k.extender.ready())
            cpu_pod = args_body(with_cpu(pod_object(0, uid="web"), "8"), names=names)
            _, every_pod = await k.client.post(EVERY_POD_VERB, cpu_pod)
            _, gpu_entry = await k.client.post("prioritize", cpu_pod)
            gpu_pod = args_body(with_cpu(pod_object(1, uid="one"), "1"), names=names)
            _, gpu_scored = await k.client.post("prioritize", gpu_pod)
            _, gpu_skipped = await k.client.post(EVERY_POD_VERB, gpu_pod)
            _, claim_skipped = await k.client.post(
                EVERY_POD_VERB, args_body(asking("containers", "limits", CLAIM_POD_RESOURCE), names=names))
            _, metrics = await k.client.get("/metrics")
    assert host_scores(every_pod, names) == host_scores(gpu_entry, names) == {"roomy": 10, "tight": 0}
    assert gpu_scored != [], "the GPU entry scores the GPU pod"
    assert gpu_skipped == claim_skipped == []  # no node listed: nothing added to any
    count = lambda name, **labels: metric_total(metrics, name, **labels)  # noqa: E731
    assert count("gpupair_extender_requests_total", verb=EVERY_POD_VERB, outcome="ok") == 3
    assert count("gpupair_extender_requests_total", verb="prioritize", outcome="ok") == 2
    assert count("gpupair_extender_decisions_total", verb=EVERY_POD_VERB, outcome="scored") == 2
    assert count("gpupair_extender_decisions_total", verb=EVERY_POD_VERB, outcome="skipped") == 4
    assert count("gpupair_extender_request_seconds_count", verb=EVERY_POD_VERB) == 3


async def test_a_body_it_cannot_decode_is_answered_in_prioritizes_error_shape():
    extender = make_extender()
    async with serving(extender) as client:
        status, answer = await client.post(EVERY_POD_VERB, b'{"Pod": {}, "NodeNames": "n1"')
        _, metrics = await client.get("/metrics")
    assert status == 400 and set(answer) == {"Error"} and answer["Error"]
    assert metric_total(metrics, "gpupair_extender_requests_total", verb=EVERY_POD_VERB, outcome="bad_request") == 1
