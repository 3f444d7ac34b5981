"""The decisions, pure functions of a layout and a request: placement, the allocation policies,
per-node decisions, preemption, reservations, placement intent, pod and claim requests, NIC asks,
the verdict, the DRA picture, and the node picture's sources (a node's report entry from its
annotations, or from a DRA driver's slices and claims). It may import gpupair.topology and
gpupair.kubewire; nothing that does I/O, so the extender, the simulator and the tests run the same
code."""
