"""`gpupair defrag`: which opted-in pods to move so that a waiting multi-GPU pod gets a close set,
planned by the decision core's planner (gpupair/decide/defrag) on the cluster as listed."""
