"""The policy window on the real apiserver: a ValidatingAdmissionPolicy takes effect a second or
so after it is applied, and a reporter started by the same install must write nothing before
its policies refuse what they should (reporter/admission_guard.py).

The reporter here is the one that would do harm: its token is bound to a pod on node A and its
--node-name says node B, so every write it makes is one the policies must refuse. The policies
are applied in the same second as it starts, their bindings held back for a few seconds (an
install whose bindings land last: the window at its longest, and long enough that a reporter
without the guard would have written in it). No annotation on B and no Lease for B may ever be
admitted, while a plain dry-run write with the same token shows the window open.
"""

from __future__ import annotations

import time
from typing import Any

from tests.controlplane.api import Api, ApiError
from tests.controlplane.gpupair_install import NAMESPACE
from tests.controlplane.workloads import SEED_TOPO

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def reporter_policies(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith("gpupair-reporter")]


def admitted(reporter: Api, node: str) -> bool | str:
    """Whether a dry-run annotation of ``node`` by the reporter's token is admitted now."""
    path = reporter.path("v1", "Node", node) + "?dryRun=All"
    try:
        reporter.request("PATCH", path, {"metadata": {"annotations": {"gpupair.io/probe": "x"}}},
                         "application/merge-patch+json")
    except ApiError as exc:
        return False if "ValidatingAdmissionPolicy" in str(exc) else str(exc)
    return True


def trace_of_b(api: Api, node: str) -> dict[str, Any]:
    """What the misconfigured reporter managed to write for ``node``: its gpupair.io/ annotations
    and its Lease."""
    annotations = api.get("v1", "Node", node)["metadata"].get("annotations") or {}
    return {"annotations": sorted(k for k in annotations if k.startswith("gpupair.io/")),
            "lease": api.find("coordination.k8s.io/v1", "Lease", node, NAMESPACE) is not None}


def test_a_reporter_writes_nothing_before_its_policies_are_enforced(api, kubelets, gpupair):
    install = gpupair("device-plugin")
    sim = kubelets()
    own, other = sim.add_node("window-a", SEED_TOPO), sim.add_node("window-b", SEED_TOPO)
    policies = reporter_policies(install.objects, "ValidatingAdmissionPolicy")
    bindings = reporter_policies(install.objects, "ValidatingAdmissionPolicyBinding")
    pod = install.reporter_pod(own)
    as_reporter = api.as_token(api.request_token(NAMESPACE, "gpupair-reporter", bound_pod=pod))
    for obj in bindings + policies:
        api.delete(obj)
    try:
        assert api.wait_for(lambda: admitted(as_reporter, other.name) is True, 30,
                            "the reporter policies out of force") is True

        for obj in policies:  # the policies and the reporter in the same second; the bindings later
            api.apply(obj)
        reporter = install.reporter(own, env={"NODE_NAME": other.name, "GPUPAIR_REPORTER_NODE_NAME": other.name},
                                    wait_ready=False)
        api.wait_for(lambda: "writing nothing until the admission policies are enforced" in reporter.log.read_text(),
                     60, "the reporter waiting for its policies")
        time.sleep(3)  # scans' worth of time: without the guard it would have written by now
        assert admitted(as_reporter, other.name) is True, "the window closed before the test could hold it open"
        assert trace_of_b(api, other.name) == {"annotations": [], "lease": False}

        for obj in bindings:
            api.apply(obj)
        api.wait_for(lambda: "admission policies enforced: writing" in reporter.log.read_text(), 60,
                     "the reporter seeing its policies enforced")
        api.wait_for(lambda: f"may not change node {other.name}" in reporter.log.read_text(), 60,
                     "the reporter's write to the other node refused by its policy")
        assert reporter.alive()
        assert trace_of_b(api, other.name) == {"annotations": [], "lease": False}
    finally:
        for obj in policies + bindings:
            api.apply(obj)
        api.wait_for(lambda: admitted(as_reporter, other.name) is False, 30, "the reporter policies back in force")
