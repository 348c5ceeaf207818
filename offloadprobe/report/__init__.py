"""Reporters: render records (never measure). One module per output format."""
