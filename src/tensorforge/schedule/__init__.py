"""tensorforge.schedule."""
