"""nlnet.functional."""
