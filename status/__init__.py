"""`gpupair status`: the cluster's GPU topology at a glance, from one list call per kind."""
