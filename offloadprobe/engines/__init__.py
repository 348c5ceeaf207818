"""Training engines offloadprobe runs strategies on: one package each, never importing
another."""
