"""Data-parallel replicas of `qtui serve` on Ray Serve (`qtui serve --replicas N`; optional extra `qtui[cluster]`)."""
