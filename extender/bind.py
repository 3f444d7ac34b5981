"""The bind verb: reserve the set the device plugin is expected to pick, then create the Binding.

On a DRA node kube-scheduler runs Reserve, Permit and PreBind before it calls an extender's bind,
and its DynamicResources plugin writes the pod's claim allocations in PreBind. Where the claim
watch has delivered them, the allocation is the pod's set: it is judged as it is, and nothing is
reserved (the picture shows it taken already). Where it has not, the allocator's pick is
predicted and held until the claim shows up, as a plan is on a device-plugin node.

The decision and the reservation happen with no ``await`` between them, so two pods bound back
to back cannot both be promised the last same-NUMA pair of a node: the second sees the first's
reservation and gets ``ExtenderBindingResult.Error`` (kube-scheduler then retries it
elsewhere). A Binding that fails rolls its reservation back and leaves an Event on the pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s

from gpupair.kubeclient.binding_client import BindingClient
from gpupair.extender.evaluation import Evaluator
from gpupair.extender.cache.pod_request_cache import PodRequests
from gpupair.extender.protocol import ExtenderBindingArgs
from gpupair.decide.judge.reservations import Reservation, Reservations
from gpupair.kubeclient import kube
from gpupair.decide.judge.verdict import PLANNED_KEY, format_set

log = logging.getLogger("gpupair.extender.bind")

COMPONENT = "gpupair-extender"
EVENT_REASON = "FailedBinding"


@dataclass
class BindOutcome:
    error: str  # "" when bound
    outcome: str  # bound | conflict | failed
    plan: tuple[int, ...] | None = None


class Binder:
    def __init__(
        self,
        api: k8s.ApiClient | None,
        evaluator: Evaluator,
        reservations: Reservations,
        requests: PodRequests,
        *,
        annotate_plan: bool = False,
        timeout: float = 5.0,
    ):
        self.api = api
        self.evaluator = evaluator
        self.reservations = reservations
        self.requests = requests
        self.annotate_plan = annotate_plan
        self.timeout = timeout
        # The Binding on a lean client of its own where it can (gpupair/kubeclient/binding_client.py): on
        # kube-scheduler's path, it is most of what a bind costs the event loop.
        self._bindings = BindingClient.for_api(api) if api is not None else None
        self._background: set[asyncio.Task] = set()

    async def bind(self, args: ExtenderBindingArgs) -> BindOutcome:
        started = time.perf_counter()
        pod_ref = {"kind": "Pod", "apiVersion": "v1",
                   "metadata": {"name": args.PodName, "namespace": args.PodNamespace,
                                **({"uid": args.PodUID} if args.PodUID else {})}}
        if self.api is None:
            return BindOutcome("gpupair extender has no Kubernetes API access: cannot create the Binding", "failed")
        key = args.PodUID or f"{args.PodNamespace}/{args.PodName}"
        gpus, filtered_intent = self.requests.asked(args.PodUID)
        if gpus is None:  # filtered by another replica before a restart, and not yet watched
            try:
                gpus = await self.requests.fetch(self.api, args.PodNamespace, args.PodName, args.PodUID,
                                                 self.timeout)
            except Exception as exc:  # noqa: BLE001 - any API failure becomes the protocol's Error
                message = f"cannot read pod {args.PodNamespace}/{args.PodName} to plan its GPUs: {kube.describe_error(exc)}"
                self._event(pod_ref, message)
                return BindOutcome(message, "failed")

        # --- check and reserve: no await from here to the reservation
        intent = filtered_intent or self.evaluator.claimed_intent(args.PodUID) or self.evaluator.default_intent
        # On a DRA node kube-scheduler has allocated the pod's claims in PreBind already: where
        # the claim watch has shown them, those devices are the pod's set, and nothing is held.
        own = self.evaluator.owned_on(args.PodUID, args.Node) if gpus > 0 else frozenset()
        decision = self.evaluator.decide_one(gpus, args.Node, exclude_uid=key, intent=intent, own=own)
        if not decision.passes:
            message = f"node {args.Node} can no longer take this pod: {decision.reason}"
            if own and len(own) >= gpus:
                # The allocation itself breaks the intent. Refused, the scheduler deallocates and
                # tries again, and the allocator would most likely take the same devices: the
                # pod's filter keeps it off this node for a while, so it goes elsewhere or waits
                # with this reason instead of looping.
                self.evaluator.deny(args.PodUID, args.Node, f"at bind, {decision.reason}")
            self._event(pod_ref, message)
            return BindOutcome(message, "conflict")
        plan = decision.plan if gpus > 0 else None
        if plan and not own:
            self.reservations.reserve(Reservation(key, args.Node, frozenset(plan), args.PodNamespace, args.PodName))
        # --- end of the synchronous section

        annotations = {PLANNED_KEY: format_set(plan)} if (self.annotate_plan and plan) else None
        try:
            async with asyncio.timeout(self.timeout):  # no task of its own, unlike wait_for
                if self._bindings is not None:
                    await self._bindings.bind(args.PodNamespace, args.PodName, args.Node, args.PodUID or None,
                                              annotations)
                else:
                    await kube.bind_pod(self.api, args.PodNamespace, args.PodName, args.Node, args.PodUID or None,
                                        annotations)
        except Exception as exc:  # noqa: BLE001 - timeouts, refused connections, API errors alike
            if plan and not own:
                self.reservations.release(key)
            message = f"binding pod {args.PodNamespace}/{args.PodName} to {args.Node} failed: {kube.describe_error(exc)}"
            log.warning("bind failed", extra={"pod": f"{args.PodNamespace}/{args.PodName}", "node": args.Node,
                                              "error": kube.describe_error(exc)})
            self._event(pod_ref, message)
            return BindOutcome(message, "failed", plan)
        # Registered without managedResources the extender binds every pod of the cluster: a line
        # per CPU-only pod said nothing an operator needs, and cost more than the bind around it.
        if gpus > 0 or log.isEnabledFor(logging.DEBUG):
            log.log(logging.INFO if gpus > 0 else logging.DEBUG, "bound", extra={
                "pod": f"{args.PodNamespace}/{args.PodName}", "node": args.Node, "gpus": gpus,
                "plan": format_set(plan) if plan else "",
                # the bind's own time, the Binding's write in it: one pod's figure, where the
                # latency histogram has buckets
                "seconds": round(time.perf_counter() - started, 6)})
        return BindOutcome("", "bound", plan)

    def _event(self, pod_ref: dict[str, Any], message: str) -> None:
        """Record a Warning Event on the pod without holding up the answer to the scheduler."""
        if self.api is None:
            return
        task = asyncio.get_running_loop().create_task(self._send_event(pod_ref, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_event(self, pod_ref: dict[str, Any], message: str) -> None:
        assert self.api is not None
        try:
            await asyncio.wait_for(
                kube.create_event(self.api, pod_ref, EVENT_REASON, message, type="Warning",
                                  component=COMPONENT, action="Binding"),
                self.timeout,
            )
        except Exception as exc:  # noqa: BLE001 - an Event is best effort
            log.warning("could not record event", extra={"pod": pod_ref["metadata"]["name"], "error": kube.describe_error(exc)})

    async def drain(self) -> None:
        """Wait for pending Events (shutdown, tests)."""
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        """Drain, then close the Binding connections (shutdown)."""
        await self.drain()
        if self._bindings is not None:
            await self._bindings.close()
