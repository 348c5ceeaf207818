"""Pure accounting for projecting offload costs to production scale (no measurement)."""
