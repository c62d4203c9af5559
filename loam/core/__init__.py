"""The symbolic core: extents as polynomials, bounds, derived symbols, owed conditions, dtypes, errors, limits.

It imports nothing of Loam but `loam.runtime`; every layer above reads extents through it (the layer order
is `loam.tools.layers`)."""
