"""gpupair.io/scope: nvlink from the links the reporters measured (--node-links-file): the
subrequests of each class of nodes, none for an NVSwitch board, a warning where no node has an
NVLink pair, --nvlink-pairs as the override; the node-links document read again when the mounted
file changes, over the webhook's real TLS."""

from __future__ import annotations

import json
import os

import pytest

from gpupair.decide.picture.dra_picture import claim_demand
from gpupair.decide.pod.intent import PLACEMENT_KEY, Intent
from gpupair.decide.claims.nvlink_classes import nvlink_choices
from gpupair.kubewire import dra
from gpupair.topology.node_links import encode_node_links
from gpupair.topology.report import encode_topology
from gpupair.webhook.admission import InjectOptions
from gpupair.webhook.app import create_app
from gpupair.webhook.claims import ClaimOptions
from gpupair.webhook.node_links_file import NodeLinksFile
from gpupair.webhook.sidecar import SidecarOptions
from gpupair.command.tls import ReloadingTLS
from tests.core.decide.claims.test_nvlink_classes import A6000, HGX_BUSES, HGX_H100, PCIE_5090, board, pci_pair, selector
from tests.webhook.claim_shapes import apply, as_created, plain_claim, plain_template
from tests.webhook.test_claim_nvlink import scoped, subrequests
from tests.webhook.test_claims import patched, plan
from tests.webhook.test_webhook_claims_server import answer, review_for
from tests.webhook.test_webhook_server import SERVICE_NAME, ThreadedServer, ca, decode_patch, write_pair  # noqa: F401

A6000_NODES = {f"a6000-{n}": board(A6000, f"a6000-{n}") for n in (1, 2)}
H100_NODES = {f"h100-{n}": board(HGX_H100, f"h100-{n}", HGX_BUSES) for n in (1, 2)}


def measured(layouts) -> ClaimOptions:
    choices = nvlink_choices(layouts)
    return ClaimOptions(nvlink_source=lambda: choices)


def test_a_bridged_class_gets_its_pairs_by_pci_address():
    after = patched(scoped(plain_claim()), Intent.REQUIRED, options=measured(A6000_NODES))
    assert subrequests(after) == [(f"nvlink-{n}", [pci_pair(2 * n, 2 * n + 1)]) for n in range(4)]
    demand = claim_demand(dra.parse_claim({**after, "metadata": {**after["metadata"], "name": "c"}}),
                          frozenset({"gpu.nvidia.com"}))
    assert demand.policy == "dra-nvlink-pairs"


def test_an_nvswitch_cluster_gets_no_pair_and_the_extender_still_reads_nvlink():
    """One subrequest without a selector: any two GPUs, as the allocator would take them, and the
    name the extender and the verdict read the scope from (no NUMA constraint: NV18 crosses sockets)."""
    after = patched(scoped(plain_claim()), Intent.REQUIRED, options=measured(H100_NODES))
    assert subrequests(after) == [("nvlink-0", [])]
    assert "constraints" not in after["spec"]["devices"]
    demand = claim_demand(dra.parse_claim({**after, "metadata": {**after["metadata"], "name": "c"}}),
                          frozenset({"gpu.nvidia.com"}))
    assert (demand.gpus, demand.policy) == (2, "dra-nvlink-pairs")


def test_an_nvswitch_class_beside_a_bridged_one_is_named_by_its_devices():
    after = patched(scoped(plain_claim()), Intent.PREFERRED, options=measured({**A6000_NODES, **H100_NODES}))
    hgx = selector("pciBusID", [f"0000:{b:02x}:00.0" for b in HGX_BUSES])
    assert [name for name, _ in subrequests(after)] == ["nvlink-0", "nvlink-1", "nvlink-2", "nvlink-3", "nvlink-4", "any"]
    assert subrequests(after)[4] == ("nvlink-4", [hgx]) and subrequests(after)[5] == ("any", [])


def test_required_with_no_nvlink_pair_anywhere_waits_and_says_so():
    options = measured({"rtx-1": board(PCIE_5090, "rtx-1")})
    result = plan(scoped(plain_claim()), Intent.REQUIRED, options=options)
    assert result.notes == ["gpupair: request 'gpus': no node the reporters measured has an NVLink pair: "
                            "under required it waits until one does"]
    assert subrequests(apply(scoped(plain_claim()), result.ops)) == [("nvlink-0", [])]


def test_preferred_with_no_nvlink_pair_anywhere_is_placed_as_under_numa():
    options = measured({"rtx-1": board(PCIE_5090, "rtx-1")})
    result = plan(scoped(plain_claim()), Intent.PREFERRED, options=options)
    assert result.outcome == "claim-prioritized"
    assert result.notes == ["gpupair: request 'gpus': no node the reporters measured has an NVLink pair: "
                            "placed as under numa"]


def test_the_cluster_wide_pairs_override_the_measured_links():
    options = ClaimOptions(nvlink_pairs=((0, 1),), nvlink_source=measured(H100_NODES).nvlink_source)
    after = patched(scoped(plain_claim()), Intent.REQUIRED, options=options)
    assert subrequests(after) == [("nvlink-0", ["device.attributes[device.driver].index in [0, 1]"])]


def test_unknown_links_keep_the_numa_rule():
    after = patched(scoped(plain_claim()), Intent.REQUIRED, options=measured({}))
    assert "firstAvailable" not in after["spec"]["devices"]["requests"][0]
    assert after["spec"]["devices"]["constraints"][0]["matchAttribute"] == "resource.kubernetes.io/numaNode"


# --- the mounted document, over the webhook's real TLS --------------------------------------------


def write_links(path, layouts) -> None:
    """As the kubelet updates a ConfigMap volume: a new file renamed into place."""
    staged = path.with_suffix(".new")
    staged.write_text(encode_node_links({name: encode_topology(layout) for name, layout in layouts.items()}))
    os.replace(staged, path)


@pytest.fixture
def links_server(ca, tmp_path):  # noqa: F811
    cert_path, key_path = write_pair(ca.issue_cert("127.0.0.1", SERVICE_NAME), tmp_path)
    links = tmp_path / "node-links.json"
    options = InjectOptions(sidecar=SidecarOptions(image="registry.example/gpupair:test"),
                            claims=ClaimOptions(nvlink_source=NodeLinksFile(str(links))))
    with ThreadedServer(create_app(options), ReloadingTLS(str(cert_path), str(key_path)).context) as running:
        yield running, links


def paired_template(server, ca, intent: str = "required") -> tuple[dict, dict]:  # noqa: F811
    # The template asks its own placement: one that asks none is left for its claims (their pods'
    # asks) to be planned one by one.
    template = as_created(scoped(plain_template()))
    template["metadata"]["annotations"][PLACEMENT_KEY] = intent
    response = answer(server, ca, review_for(template), f"/mutate/placement/{intent}?timeout=5s")
    return apply(template, decode_patch({"response": response})), response


def test_the_webhook_follows_the_mounted_links_as_they_change(links_server, ca):  # noqa: F811
    server, links = links_server
    before, _ = paired_template(server, ca)
    assert "constraints" in before["spec"]["spec"]["devices"], "no file yet: the numa rule"

    write_links(links, A6000_NODES)
    after, _ = paired_template(server, ca)
    assert [name for name, _ in subrequests(after)] == ["nvlink-0", "nvlink-1", "nvlink-2", "nvlink-3"]

    write_links(links, H100_NODES)
    after, _ = paired_template(server, ca)
    assert subrequests(after) == [("nvlink-0", [])]

    write_links(links, {"rtx-1": board(PCIE_5090, "rtx-1")})
    after, response = paired_template(server, ca)
    assert subrequests(after) == [("nvlink-0", [])]
    assert response["warnings"] == ["gpupair: request 'gpus': no node the reporters measured has an NVLink pair: "
                                    "under required it waits until one does"]


def test_a_broken_document_counts_as_unknown_links(links_server, ca):  # noqa: F811
    server, links = links_server
    links.write_text(json.dumps({"v": 2, "nodes": {}}))
    after, _ = paired_template(server, ca)
    assert "constraints" in after["spec"]["spec"]["devices"] and "firstAvailable" not in \
        after["spec"]["spec"]["devices"]["requests"][0]


def test_a_node_whose_topology_does_not_decode_is_left_out_and_the_rest_kept(tmp_path):
    from gpupair.topology.node_links import decode_node_links

    text = encode_node_links({"a6000-1": encode_topology(A6000_NODES["a6000-1"]), "bad-1": '{"v":1,"devices":[]'})
    layouts, problems = decode_node_links(text)
    assert list(layouts) == ["a6000-1"] and list(problems) == ["bad-1"]
    assert problems["bad-1"].startswith("gpupair.io/topology rejected at")
