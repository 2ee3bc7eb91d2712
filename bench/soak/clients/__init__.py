"""The soak's client kinds, one module each."""
