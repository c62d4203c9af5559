"""Text generation over a compiled decoder: the tokenizer, the decoder check, the token picker, the decode loop.

The decoder interface (`decoder`) and the token picker (`pick`) serve `loam generate` (`generate`) and
`loam serve`'s text role alike.
"""
