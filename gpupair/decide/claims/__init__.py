"""What a pod's DRA ResourceClaims say: their placement intent (`claim_intent`), why no node can
allocate them (`claim_explain`), and the NVLink pairs a claim may take (`nvlink_classes`)."""
