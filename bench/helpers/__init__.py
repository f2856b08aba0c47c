"""What the suite, the probes and the harness share: timing, trials, servers, peers, plots."""
