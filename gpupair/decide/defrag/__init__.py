"""Defragmentation: which movable pods to move so a waiting pod gets a close set (`planner`),
on a picture of each node's room and the pods on it (`fleet`), with the close set a node can give
a pod (`close_sets`). Pure: the simulator runs it, and the live modes (gpupair#53) are to run the same code."""
