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
    assert scores == []  # every node 0: none listed
    assert decoded_for_cpu_pods == 0
    assert len(extender.evaluator.last_seen) == 3 and gpu["FailedNodes"]  # a GPU pod's request decodes them


async def test_binding_a_cpu_pod_logs_nothing_at_info_and_a_gpu_pod_its_plan(caplog):
    import logging

    from tests.extender.test_extender_bind import bind_body, create_pod
    from tests.extender_support import eventually, kube_extender, report_annotations
    from tests.kube_double import make_node, running_kube_double

    async with running_kube_double() as double:
        double.store.create("nodes", make_node("gpu-node-a", annotations=report_annotations(set(range(8)), node="a")))
        create_pod(double, gpus=0, name="web", uid="uid-web")
        create_pod(double, gpus=2, name="train", uid="uid-train")
        async with kube_extender(double) as k:
            await eventually(k.extender.ready, what="nodes and pods listed")
            await k.client.post("filter", args_body(pod_object(0, name="web", uid="uid-web"), names=["gpu-node-a"]))
            await k.client.post("filter", args_body(pod_object(2, name="train", uid="uid-train"), names=["gpu-node-a"]))
            with caplog.at_level(logging.INFO, logger="gpupair"):
                web = await k.client.post("bind", bind_body("web", "uid-web"))
                train = await k.client.post("bind", bind_body("train", "uid-train"))
    assert web[1] == train[1] == {"Error": ""}
    bound = [r for r in caplog.records if r.getMessage() == "bound"]
    assert [r.pod for r in bound] == ["gpupair-test/train"] and bound[0].plan == "GPU0+GPU1"
    assert 0 < bound[0].seconds < 5  # how long this bind took, the Binding in it
