"""Pods that ask for no GPU, as the extender sees every pod of the cluster when registered
without managedResources (for DRA claim pods): every node passes with score 0, and nothing of
the nodes is decoded for them."""

from __future__ import annotations

from tests.extender_support import args_body, make_extender, node_object, pod_object, serving


async def test_a_cpu_pod_passes_every_node_unscored_without_their_reports_being_decoded():
    extender = make_extender()
    nodes = [node_object(f"n{i}", {"gpupair.io/topology": "{not json"}) for i in range(3)]
    names = ["a", "b", "c"]
    async with serving(extender) as client:
        _, by_nodes = await client.post("filter", args_body(pod_object(0), nodes=nodes))
        _, by_names = await client.post("filter", args_body(pod_object(0), names=names))
        _, scores = await client.post("prioritize", args_body(pod_object(0), names=names))
        decoded_for_cpu_pods = len(extender.evaluator.last_seen)
        _, gpu = await client.post("filter", args_body(pod_object(2), nodes=nodes))
    assert by_nodes["Nodes"]["items"] == nodes and by_nodes["FailedNodes"] == {}
    assert by_names == {"Nodes": None, "NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                        "Error": ""}
    assert scores == [{"Host": name, "Score": 0} for name in names]
    assert decoded_for_cpu_pods == 0
    assert len(extender.evaluator.last_seen) == 3 and gpu["FailedNodes"]  # a GPU pod's request decodes them
