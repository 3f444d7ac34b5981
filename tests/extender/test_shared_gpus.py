"""GPUs shared by time-slicing, in the extender's filter (real loopback HTTP, both node-cache
modes): where a node's nvidia.com/gpu is replicas (no renameByDefault, gpupair.io/shares says
so), a pod asking several could be handed one GPU twice, so it never passes there; a pod asking
one still does, and a node whose replicas are renamed is an ordinary whole-GPU node to it."""

from __future__ import annotations

import pytest

from gpupair.topology import report
from gpupair.topology.shares import SHARES_KEY, GpuShares, encode_shares
from tests.extender_support import args_body, make_extender, node_object, pod_object, report_annotations, serving


def shared_node(name: str, replicated: bool) -> dict:
    """Every GPU in four replicas, GPU0 with one taken (not free), the rest free."""
    annotations = report_annotations(set(range(1, 8)), node=name)
    fingerprint = report.fingerprint(annotations[report.TOPOLOGY_KEY])
    shares = GpuShares((4,) * 8, (1,) + (0,) * 7, replicated)
    annotations[SHARES_KEY] = encode_shares(shares, fingerprint, 1)
    return node_object(name, annotations)


NODES = [shared_node("replicated", True), shared_node("renamed", False)]
NAMES = ["replicated", "renamed"]


async def filtered(gpus: int, cached: bool) -> dict:
    extender = make_extender(node_cache=cached)
    if cached:
        extender.node_cache.replace(NODES)
    body = args_body(pod_object(gpus), names=NAMES) if cached else args_body(pod_object(gpus), nodes=NODES)
    async with serving(extender) as client:
        status, answer = await client.post("filter", body)
    assert status == 200 and answer["Error"] == ""
    return answer


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_a_multi_gpu_pod_never_passes_where_its_gpus_may_be_one_gpus_replicas(cached):
    answer = await filtered(2, cached)
    passed = answer["NodeNames"] if cached else [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert passed == ["renamed"]
    reason = answer["FailedAndUnresolvableNodes"]["replicated"]
    assert "time-slicing replicas" in reason and "renameByDefault" in reason


@pytest.mark.parametrize("cached", [False, True], ids=["nodes", "node-names"])
async def test_a_one_gpu_pod_passes_on_replicas(cached):
    answer = await filtered(1, cached)
    passed = answer["NodeNames"] if cached else [n["metadata"]["name"] for n in answer["Nodes"]["items"]]
    assert passed == NAMES
