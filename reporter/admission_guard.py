"""Write nothing before the admission policies that bound the reporter are enforced.

RBAC lets the reporter patch every Node; the ValidatingAdmissionPolicies in deploy/ narrow that
to its own node's ``gpupair.io/`` annotations and its own node's Lease. The apiserver loads a
new policy in the background: for 0.75-1.5 s after an install applies it (measured on two
cores), it still admits what the policy refuses, and a reporter started by the same install
could write in that window with nothing checking it (a wrong --node-name would annotate another
node). So before its first write the reporter asks, with dry-run requests that the policies must
refuse, whether they are in force:

- a dry-run merge patch of its node that sets an annotation outside ``gpupair.io/``
  (``gpupair-reporter-nodes`` refuses it);
- with a Lease namespace, a dry-run create of a Lease not named after its node
  (``gpupair-reporter-leases`` refuses it).

A refusal that names a ValidatingAdmissionPolicy means in force. A dry run admitted means not
yet: it logs that, writes nothing, and asks again with jittered backoff. Any other answer (the
apiserver away, RBAC) is retried the same way. Dry runs persist nothing and reach no webhook
with side effects. Where the policies are deliberately not installed, ``--admission-probe=false``
skips the wait.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable

from kubernetes_asyncio import client as k8s

from gpupair.kubeclient import kube
from gpupair.kubewire import leases
from gpupair.reporter.publisher import backoff_delay

log = logging.getLogger("gpupair.reporter.admission")

PROBE_ANNOTATION = "admission-probe.gpupair.invalid/refused"  # outside gpupair.io/: the policy must refuse it
POLICY_DENIAL = "ValidatingAdmissionPolicy"  # the apiserver's refusal names the policy so


def _enforced(error: BaseException) -> bool:
    body = str(getattr(error, "body", "") or "")
    return getattr(error, "status", None) in (403, 422) and POLICY_DENIAL in body


class AdmissionGuard:
    """``wait_enforced`` returns once every probe is refused by a policy (True), or when
    ``stop`` is set first (False); ``enforced`` says which."""

    def __init__(self, api: k8s.ApiClient, node: str, lease_namespace: str = "", *,
                 backoff_base: float = 0.2, backoff_cap: float = 10.0,
                 rng: Callable[[], float] = random.random) -> None:
        self.api = api
        self.node = node
        self.lease_namespace = lease_namespace
        self.backoff = (backoff_base, backoff_cap)
        self.rng = rng
        self.enforced = False
        self.probes = 0
        self.last_why = ""  # why the last probe round did not let it write

    def _probes(self) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
        core = k8s.CoreV1Api(self.api)
        node_patch = {"metadata": {"annotations": {PROBE_ANNOTATION: "1"}}}
        probes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("gpupair-reporter-nodes", lambda: core.patch_node(
                self.node, node_patch, dry_run="All", _content_type=kube.MERGE_PATCH)),
        ]
        if self.lease_namespace:
            coordination = k8s.CoordinationV1Api(self.api)
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": f"{self.node}.admission-probe", "namespace": self.lease_namespace,
                                  "labels": dict(leases.LABELS)},
                     "spec": {"holderIdentity": self.node}}
            probes.append(("gpupair-reporter-leases", lambda: coordination.create_namespaced_lease(
                self.lease_namespace, lease, dry_run="All")))
        return probes

    async def _not_enforced(self) -> str:
        """Why the reporter may not write yet ("" when every probe was refused by its policy)."""
        for policy, probe in self._probes():
            self.probes += 1
            try:
                await probe()
            except Exception as exc:  # noqa: BLE001 - a refusal is the answer hoped for; anything else is retried
                if _enforced(exc):
                    continue
                return f"{policy}: the probe got {kube.describe_error(exc)}"
            return f"{policy} is not enforced yet: a dry-run write it must refuse was admitted"
        return ""

    async def wait_enforced(self, stop: asyncio.Event) -> bool:
        failures = 0
        while not stop.is_set():
            why = self.last_why = await self._not_enforced()
            if not why:
                self.enforced = True
                log.info("admission policies enforced: writing", extra={"node": self.node, "probes": self.probes})
                return True
            failures += 1
            delay = backoff_delay(failures, *self.backoff, self.rng)
            log.warning("writing nothing until the admission policies are enforced",
                        extra={"node": self.node, "why": why, "retry_in_s": round(delay, 2)})
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except asyncio.TimeoutError:
                pass
        return False
