"""Text generation over a compiled decoder: the tokenizer and the decode loop `loam generate` runs."""
