"""The serving contract's tokenizer flags, as requests give them (`tokenizer_flags`) and as the controls read them.

Encoding: ADD_SPECIAL_TOKENS adds the BOS/EOS framing the tokenizer asks for; NO_SPECIAL_TOKEN_MATCHING
reads the text of special tokens (`<|im_start|>`) as plain text.  Decoding: SKIP_SPECIAL_TOKENS leaves
special tokens out of the text.  Zero retains them.
"""

SKIP_SPECIAL_TOKENS = 1
ADD_SPECIAL_TOKENS = 4
NO_SPECIAL_TOKEN_MATCHING = 8
ALL = SKIP_SPECIAL_TOKENS | ADD_SPECIAL_TOKENS | NO_SPECIAL_TOKEN_MATCHING
