"""Reading what someone else wrote without trusting it: limits, guards, probes, user code."""
