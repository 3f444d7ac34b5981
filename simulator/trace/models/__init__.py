"""The trace's models of the scheduler, vectorised over the fleet's node rows: kube-scheduler's
and FGD's scoring (scoring_policies), its search for feasible nodes (nodes_to_score), who picks
whole GPUs on a node and gpupair's extender (devices), and gpupair's fragmentation score
(gpupair_score)."""
