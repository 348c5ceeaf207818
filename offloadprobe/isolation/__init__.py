"""isolation."""
