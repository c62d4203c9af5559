// An empty module: input for tests that fail before reading it.
