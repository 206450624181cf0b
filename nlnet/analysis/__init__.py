"""nlnet.analysis."""
