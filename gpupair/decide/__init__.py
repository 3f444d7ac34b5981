"""The decisions, pure functions of a layout and a request, by concern: what a pod asks (pod/),
what its DRA claims say (claims/), where a node's state comes from (picture/), which devices a
pod gets on a node (devices/), the judgements on a node (judge/) and the fragmentation score
(score/). It may import gpupair.topology and gpupair.kubewire; nothing that does I/O, so the
extender, the simulator and the tests run the same code."""
