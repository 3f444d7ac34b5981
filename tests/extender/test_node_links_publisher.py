"""The extender publishes the nodes' measured links (ConfigMap gpupair-node-links) from its Node
watch: the document follows node events, is written once per burst and only when it changed,
and a missing ConfigMap is retried, not fatal. Against the API double over loopback HTTP, with the
real ListWatch and kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import logging

from kubernetes_asyncio import client as k8s

from gpupair.kubeclient.list_watch import ListWatch
from gpupair.extender.node_links_publisher import NodeLinks, NodeLinksPublisher
from gpupair.topology.node_links import FILE_KEY, decode_node_links, encode_node_links
from gpupair.topology.report import TOPOLOGY_KEY, encode_topology
from tests.core.decide.claims.test_nvlink_classes import A6000, HGX_BUSES, HGX_H100, board
from tests.extender_support import eventually
from tests.kube_double import kube_client_for, make_node, running_kube_double

A6000_TOPOLOGY = encode_topology(board(A6000, "a6000-1"))
H100_TOPOLOGY = encode_topology(board(HGX_H100, "h100-1", HGX_BUSES))
NAMESPACE, NAME = "gpupair-system", "gpupair-node-links"


def node(name: str, topology: str | None, **annotations: str) -> dict:
    return make_node(name, annotations={**({TOPOLOGY_KEY: topology} if topology else {}), **annotations})


# --------------------------------------------------------------------------- the document from node events


def test_the_document_follows_node_events_and_only_topology_changes_move_it():
    changes = []
    links = NodeLinks(on_change=lambda: changes.append(1))
    links.apply("ADDED", node("early", A6000_TOPOLOGY))  # before the first list: no change yet
    assert changes == [] and not links.ready
    links.replace([node("a6000-1", A6000_TOPOLOGY), node("cpu-1", None), {"metadata": {}}])
    assert links.ready and changes == [1] and links.topologies == {"a6000-1": A6000_TOPOLOGY}
    links.apply("MODIFIED", node("a6000-1", A6000_TOPOLOGY, **{"gpupair.io/free": "{}"}))  # free GPUs: no change
    links.apply("MODIFIED", node("cpu-1", None))
    assert changes == [1]
    links.apply("ADDED", node("h100-1", H100_TOPOLOGY))
    links.apply("DELETED", node("a6000-1", A6000_TOPOLOGY))
    links.apply("DELETED", node("never-seen", None))
    assert len(changes) == 3
    document, form = links.document()
    assert form == "full" and document == encode_node_links({"h100-1": H100_TOPOLOGY})
    assert list(decode_node_links(document)[0]) == ["h100-1"]


# --------------------------------------------------------------------------- the writer


async def configmap(double, data=None) -> None:
    double.store.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": NAME, "namespace": NAMESPACE},
                                       **({"data": data} if data is not None else {})}, NAMESPACE)


def published(double) -> str | None:
    return (double.store.get("configmaps", NAME, NAMESPACE).get("data") or {}).get(FILE_KEY)


async def test_the_extender_writes_the_document_once_per_burst_and_only_when_it_changed():
    async with running_kube_double() as double, kube_client_for(double) as api:
        await configmap(double)
        double.store.create("nodes", node("a6000-1", A6000_TOPOLOGY))
        double.store.create("nodes", node("cpu-1", None))
        links = NodeLinks()
        publisher = NodeLinksPublisher(api, links, NAMESPACE, NAME, debounce=0.2)
        tasks = [asyncio.create_task(ListWatch("nodes", k8s.CoreV1Api(api).list_node, links).run()),
                 asyncio.create_task(publisher.run())]
        try:
            await eventually(lambda: published(double) is not None, what="the first document written")
            assert published(double) == encode_node_links({"a6000-1": A6000_TOPOLOGY}) and publisher.writes == 1

            # A burst (two nodes join, one reports its free GPUs) is one write.
            double.store.create("nodes", node("h100-1", H100_TOPOLOGY))
            double.store.create("nodes", node("h100-2", H100_TOPOLOGY))
            double.store.patch("nodes", "a6000-1", {"metadata": {"annotations": {"gpupair.io/free": "{}"}}})
            await eventually(lambda: "h100-2" in (published(double) or ""), what="the joined nodes written")
            await asyncio.sleep(0.5)
            assert publisher.writes == 2
            layouts, problems = decode_node_links(published(double))
            assert problems == {} and sorted(layouts) == ["a6000-1", "h100-1", "h100-2"]

            # A change of anything but the links writes nothing.
            double.store.patch("nodes", "cpu-1", {"metadata": {"labels": {"x": "y"}}})
            await asyncio.sleep(0.5)
            assert publisher.writes == 2
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_replica_that_finds_the_document_written_writes_nothing():
    async with running_kube_double() as double, kube_client_for(double) as api:
        await configmap(double, {FILE_KEY: encode_node_links({"a6000-1": A6000_TOPOLOGY})})
        links = NodeLinks()
        links.replace([node("a6000-1", A6000_TOPOLOGY)])
        publisher = NodeLinksPublisher(api, links, NAMESPACE, NAME)
        assert await publisher.publish() is False and publisher.writes == 0
        links.apply("DELETED", node("a6000-1", None))
        assert await publisher.publish() is True and published(double) == encode_node_links({})


async def test_a_missing_configmap_is_logged_once_and_retried_until_it_exists(caplog):
    async with running_kube_double() as double, kube_client_for(double) as api:
        links = NodeLinks()
        publisher = NodeLinksPublisher(api, links, NAMESPACE, NAME, debounce=0.05, backoff_max=0.1)
        task = asyncio.create_task(publisher.run())
        try:
            with caplog.at_level(logging.WARNING, logger="gpupair.extender.node_links_publisher"):
                links.replace([node("a6000-1", A6000_TOPOLOGY)])
                await asyncio.sleep(0.6)
                assert not task.done()
                await configmap(double)
                await eventually(lambda: published(double) is not None, what="written once the ConfigMap exists")
            warnings = [r for r in caplog.records if r.getMessage() == "cannot publish node links; retrying"]
            assert len(warnings) == 1
            assert warnings[0].why == ("ConfigMap gpupair-system/gpupair-node-links not found: the manifests "
                                       "create it (deploy/components/dra, the chart's dra)")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
