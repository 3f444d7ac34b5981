"""`gpupair snapshot`: a live cluster's nodes and pods as the openb pair `simulate --scenario trace` replays."""
