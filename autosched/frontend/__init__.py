"""Model importers: each turns a model file into a static-shape `Graph`."""
