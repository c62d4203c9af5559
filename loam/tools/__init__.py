"""The command-line tools: loam (build, generate, serve, layout, split), loam-opt and loam-translate."""
