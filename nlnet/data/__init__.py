"""nlnet.data."""
