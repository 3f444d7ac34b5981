"""What the extender keeps between requests, fed by its watches: the node reports (node_cache),
the reporters' Leases (node_leases), the pods (pod_watch) and their GPU requests
(pod_request_cache), the decisions kept per GPU count and intent (decision_tables), and for the
fragmentation score each node's CPU and the cluster's workload (cluster_usage) and the score's
per-node inputs as arrays (score_rows). Who tells whom is in wiring.py; the verbs read these and
never write them.
"""
