"""nlnet.engine."""
