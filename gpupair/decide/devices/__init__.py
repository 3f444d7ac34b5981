"""Which devices a pod gets on a node: the rule of a close set and its score (`placement`), the
allocation policies (`policies`), and who runs one on each node (`pickers`)."""
