"""memcore's benchmark harness (not installed; run through ``memcore bench`` from a checkout)."""
