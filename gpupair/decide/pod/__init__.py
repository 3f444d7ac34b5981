"""What a pod asks, read from its spec and annotations: its GPU and CPU requests (`pod_request`),
how close its set must be (`intent`, `scope`) and whether it asks for the network (`nic_ask`)."""
