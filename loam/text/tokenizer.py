"""The tokenizer Loam ships: text to token ids and back, from a GGUF file's metadata or a `tokenizer.json`.

A language model's checkpoint carries its tokenizer.  GGUF stores it as metadata under llama.cpp's keys: the
model kind (`tokenizer.ggml.model`), how text is split before merging (`.pre`), the vocabulary (`.tokens`), each
token's kind (`.token_type`), the merges, the BOS/EOS ids, whether to add them, and a Jinja chat template.  This
module rebuilds that tokenizer on the Hugging Face `tokenizers` library, the engine a model's own
`tokenizer.json` runs on, so Loam does not carry a second BPE implementation that could drift from the field's.

Only byte-level BPE (`tokenizer.ggml.model = "gpt2"`) is read.  The pre-tokenizer names Loam knows are in
`PRE_TOKENIZERS`: llama.cpp gives "smollm" the same splitting as "starcoder", each digit on its own and then
GPT-2's regex (contractions, letters, numbers, other symbols, whitespace runs), as SmolLM2's own `tokenizer.json`
does (`Digits(individual_digits)` then `ByteLevel`).  transformers' GGUF loader (5.23) drops that digit split, so
its ids differ where a space precedes a multi-byte digit (" ½"); tests/tokenizer holds both readings.  Tokens
typed control (3) or unknown (2) become special added tokens and user-defined ones (4) plain added tokens, so
they match whole in text.  Every metadata value is checked before the engine sees it: `tokenizers` panics, past
any `except Exception`, on a merge whose result is not in the vocabulary.

The flags are the serving contract's (`loam.serve.flags`): `add_special_tokens`
(ADD_SPECIAL_TOKENS) adds BOS/EOS where the metadata asks for them (`tokenizer.ggml.add_bos_token`, absent means
no, as transformers reads it), `special_token_matching=False` (NO_SPECIAL_TOKEN_MATCHING) encodes the text of a
special token such as `<|im_start|>` as plain text, and `skip_special_tokens` (SKIP_SPECIAL_TOKENS) leaves
special tokens out of decoded text.  Each call starts afresh: no state carries from one call to the next.

The chat template comes from the model file and is untrusted: it renders only inside jinja2's
`ImmutableSandboxedEnvironment`, with the environment transformers gives templates (blocks trimmed, loop
controls, `tojson`, `raise_exception`, `strftime_now`), so a conversation renders to the same text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import NoReturn

import jinja2
import jinja2.ext
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors

from loam.core.errors import TokenizerError
from loam.frontends.gguf import read_gguf_header

# llama.cpp's token types (`llama_token_type`): which tokens match whole in text, and which of those are special.
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
_SPECIAL_TYPES = (TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_CONTROL)


def _gpt2_split() -> pre_tokenizers.PreTokenizer:
    # GPT-2's regex over the text, then each byte spelled as its printable stand-in (the vocabulary's alphabet).
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2_split() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2_split()])


PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    "gpt-2": _gpt2_split,
    "smollm": _digits_then_gpt2_split,
    "starcoder": _digits_then_gpt2_split,
    "refact": _digits_then_gpt2_split,
    "codeshell": _digits_then_gpt2_split,
}
"""`tokenizer.ggml.pre` values Loam reads, each to the splitting llama.cpp applies before the merges."""


class Tokenizer:
    """A byte-level BPE tokenizer with its special tokens and chat template.

    Build one with `from_gguf` or `from_file`; the constructor takes an already configured engine.
    """

    def __init__(
        self,
        engine: tokenizers.Tokenizer,
        *,
        source: str,
        bos_id: int | None = None,
        eos_id: int | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.engine = engine
        self.source = source
        self.bos_id = bos_id
        self.eos_id = eos_id
        self._chat_template = chat_template

    @property
    def chat_template(self) -> str | None:
        """The Jinja chat template (GGUF key `tokenizer.chat_template`), or None when the model has none."""
        return self._chat_template

    # -- construction ---------------------------------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, path: str | Path) -> Tokenizer:
        """The tokenizer described by the metadata of the GGUF file at `path` (its header alone is read)."""
        path = Path(path)
        metadata, _ = read_gguf_header(path)
        return cls.from_metadata(metadata, source=str(path))

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, object], *, source: str) -> Tokenizer:
        """The tokenizer described by GGUF metadata (llama.cpp's `tokenizer.*` keys); `source` names it in errors."""
        keys = _Metadata(metadata, source)
        kind = keys.text("tokenizer.ggml.model")
        if kind != "gpt2":
            keys.fail("tokenizer.ggml.model", f"is {kind!r}; Loam reads byte-level BPE tokenizers ('gpt2') only")
        pre = keys.text("tokenizer.ggml.pre")
        if pre not in PRE_TOKENIZERS:
            keys.fail(
                "tokenizer.ggml.pre", f"is {pre!r}, a splitting Loam does not know (known: {sorted(PRE_TOKENIZERS)})"
            )
        tokens = keys.strings("tokenizer.ggml.tokens")
        vocab = _vocabulary(keys, tokens)
        types = keys.integers("tokenizer.ggml.token_type", len(tokens))
        merges = _merges(keys, vocab)
        bos_id = keys.token_id("tokenizer.ggml.bos_token_id", len(tokens))
        eos_id = keys.token_id("tokenizer.ggml.eos_token_id", len(tokens))
        add_bos = keys.flag("tokenizer.ggml.add_bos_token")
        add_eos = keys.flag("tokenizer.ggml.add_eos_token")
        template = keys.text("tokenizer.chat_template") if "tokenizer.chat_template" in metadata else None

        engine = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
        engine.pre_tokenizer = PRE_TOKENIZERS[pre]()
        engine.decoder = decoders.ByteLevel()
        # An added token found in the vocabulary keeps its id there, so these add no new ids.
        special = [tokens[i] for i, token_type in enumerate(types) if token_type in _SPECIAL_TYPES]
        user_defined = [tokens[i] for i, token_type in enumerate(types) if token_type == TOKEN_TYPE_USER_DEFINED]
        engine.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special if t])
        engine.add_tokens([AddedToken(t, special=False, normalized=False) for t in user_defined if t])
        # What ADD_SPECIAL_TOKENS adds, as the engine's post-processor.
        before = keys.framing("bos", add_bos, bos_id, tokens)
        after = keys.framing("eos", add_eos, eos_id, tokens)
        if before or after:
            try:
                engine.post_processor = processors.TemplateProcessing(
                    single=[*before, "$A:0", *after],
                    pair=[*before, "$A:0", *after, *before, "$B:1", *after],
                    special_tokens=sorted({(tokens[i], i) for i in (bos_id, eos_id) if i is not None}),
                )
            except Exception as e:  # the template's syntax cannot spell a token holding ':' or a space
                framed = ", ".join(repr(tokens[i]) for i in (bos_id, eos_id) if i is not None)
                raise TokenizerError(
                    f"tokenizer in {source}: its BOS/EOS tokens ({framed}) cannot be added by a template ({e})"
                ) from None
        return cls(engine, source=source, bos_id=bos_id, eos_id=eos_id, chat_template=template)

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """The tokenizer of a Hugging Face `tokenizer.json`.

        Its BOS/EOS tokens and chat template come from the `tokenizer_config.json` beside it when there is one
        (`bos_token`, `eos_token`, `chat_template`, else a `chat_template.jinja` file); whether BOS is added is the
        `tokenizer.json`'s own post-processor's business.  Its padding and truncation settings are dropped.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
            engine = tokenizers.Tokenizer.from_str(text)
        except Exception as e:  # the engine reports malformed files as plain Exception
            raise TokenizerError(f"tokenizer {path}: cannot read it: {e}") from None
        _check_ids(engine, path)
        try:
            described = json.loads(text)
        except ValueError:  # JSON the engine took and Python's json does not: its panics stay guarded
            described = {}
        _check_post_processor(described.get("post_processor"), engine.get_vocab_size(with_added_tokens=True), path)
        # A tokenizer.json may ask for padding and truncation (sentence encoders ship both): padding is the
        # batcher's business, and cutting a long input short would be a wrong answer where a refusal is right.
        engine.no_padding()
        engine.no_truncation()
        config = _tokenizer_config(path.with_name("tokenizer_config.json"))
        ids = {name: _config_token_id(engine, config, name, path) for name in ("bos_token", "eos_token")}
        template = config.get("chat_template")
        if isinstance(template, list):  # several named templates: the default one
            template = next(
                (t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None
            )
        if template is None and path.with_name("chat_template.jinja").is_file():
            template = path.with_name("chat_template.jinja").read_text(encoding="utf-8")
        if template is not None and not isinstance(template, str):
            raise TokenizerError(f"tokenizer {path}: tokenizer_config.json key 'chat_template' is not a string")
        return cls(engine, source=str(path), bos_id=ids["bos_token"], eos_id=ids["eos_token"], chat_template=template)

    # -- the vocabulary -------------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """How many ids the tokenizer has (the model's logits dimension for a GGUF tokenizer)."""
        return self.engine.get_vocab_size(with_added_tokens=True)

    def token_text(self, token_id: int) -> str:
        """The vocabulary's spelling of one token (byte-level: `Ġ` stands for a space)."""
        text = self.engine.id_to_token(self._checked([token_id])[0])
        assert text is not None, token_id
        return text

    # -- encoding and decoding ------------------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True, special_token_matching: bool = True) -> list[int]:
        """The ids of `text`.

        `add_special_tokens` adds BOS (and EOS) where the tokenizer's metadata asks for them;
        `special_token_matching=False` reads the text of special tokens such as `<|im_start|>` as plain text
        (user-defined added tokens still match whole, as in llama.cpp).
        """
        engine = self.engine if special_token_matching else self._plain_text_engine
        with self._engine_panics():
            return engine.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_pair(self, text: str, pair: str) -> tuple[list[int], list[int]]:
        """The ids of the pair (`text`, `pair`) as the tokenizer's pair template frames it (a BERT tokenizer's
        `[CLS] text [SEP] pair [SEP]`), and each id's token type (0 for the first part, 1 for the second)."""
        with self._engine_panics():
            encoded = self.engine.encode(text, pair, add_special_tokens=True)
        return encoded.ids, encoded.type_ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that do not form UTF-8 become U+FFFD."""
        checked = self._checked(ids)
        with self._engine_panics():
            return self.engine.decode(checked, skip_special_tokens=skip_special_tokens)

    def decode_stream(self, skip_special_tokens: bool = False) -> DecodeStream:
        """A decoder for ids that arrive one at a time (`loam generate`)."""
        return DecodeStream(self, skip_special_tokens=skip_special_tokens)

    @cached_property
    def _plain_text_engine(self) -> tokenizers.Tokenizer:
        # A twin whose special tokens do not match in text; a twin rather than toggling the flag on the
        # shared engine, so that no encode call can see another's setting.
        twin = tokenizers.Tokenizer.from_str(self.engine.to_str())
        twin.encode_special_tokens = True
        return twin

    @contextmanager
    def _engine_panics(self) -> Iterator[None]:
        # The checks at load refuse what is known to make `tokenizers` panic; a panic they miss is still the
        # file's fault, not Loam's, and must not escape as a BaseException past every `except Exception`.
        try:
            yield
        except BaseException as e:
            if type(e).__name__ != "PanicException":
                raise
            raise TokenizerError(f"tokenizer {self.source}: the tokenizers engine failed on it ({e})") from None

    def _checked(self, ids: Iterable[int]) -> list[int]:
        checked = [int(i) for i in ids]
        size = self.vocab_size
        for position, token_id in enumerate(checked):
            if not 0 <= token_id < size:
                raise TokenizerError(
                    f"tokenizer {self.source}: id {token_id} at position {position} is outside its vocabulary "
                    f"(ids 0 to {size - 1})"
                )
        return checked

    # -- chat -----------------------------------------------------------------------------------------------------

    def render_chat(self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True) -> str:
        """The conversation `messages` (each with a `role` and `content`) as the model's chat template writes it.

        `add_generation_prompt` ends the text with the header that opens the assistant's reply.  Keys whose value
        is None are dropped from each message, as transformers does, so a template tests for them as absent.
        """
        plain = []
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise TokenizerError(f"chat message {index} is a {type(message).__name__}, not a mapping")
            plain.append({str(key): value for key, value in message.items() if value is not None})
        context: dict[str, object] = {name: self.token_text(i) for name, i in self._named_tokens().items()}
        context |= {"messages": plain, "add_generation_prompt": add_generation_prompt}
        try:
            return self._compiled_template.render(context)
        except Exception as e:  # the template is the model file's code: any failure of it is the file's fault
            raise TokenizerError(f"{self._template_where()}: rendering failed: {type(e).__name__}: {e}") from None

    def encode_chat(self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True) -> list[int]:
        """The ids of the rendered conversation; no BOS/EOS is added, the template writes its own framing."""
        return self.encode(self.render_chat(messages, add_generation_prompt), add_special_tokens=False)

    def _named_tokens(self) -> dict[str, int]:
        named = {"bos_token": self.bos_id, "eos_token": self.eos_id}
        return {name: token_id for name, token_id in named.items() if token_id is not None}

    def _template_where(self) -> str:
        return f"chat template of {self.source} (tokenizer.chat_template)"

    @cached_property
    def _compiled_template(self) -> jinja2.Template:
        if self._chat_template is None:
            raise TokenizerError(f"tokenizer {self.source} has no chat template (key 'tokenizer.chat_template')")
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = _raise_from_template
        environment.globals["strftime_now"] = _strftime_now
        try:
            return environment.from_string(self._chat_template)
        except jinja2.TemplateSyntaxError as e:
            raise TokenizerError(f"{self._template_where()}: line {e.lineno}: {e.message}") from None


class DecodeStream:
    """Text for ids that arrive one at a time, never splitting a character across two pieces.

    A multi-byte UTF-8 character can span tokens (an emoji is often three), so a token's text is held back
    while the text decoded so far ends in an incomplete character.  `step` returns the text that became
    complete (possibly ""); `finish` returns what is still held back, with U+FFFD for bytes that never
    completed a character.  Joined, the pieces are `decode(all ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._held: list[int] = []  # ids whose text ends in an incomplete character

    def step(self, token_id: int) -> str:
        """The text that became complete when `token_id` arrived ("" while a character is incomplete)."""
        self._held.append(token_id)
        text = self.tokenizer.decode(self._held, self.skip_special_tokens)
        if text.endswith("\ufffd"):
            return ""
        # UTF-8 resynchronizes after a complete character, so the text of later ids never depends on these.
        self._held.clear()
        return text

    def finish(self) -> str:
        """What `step` held back (bytes that never completed a character decode to U+FFFD)."""
        text = self.tokenizer.decode(self._held, self.skip_special_tokens) if self._held else ""
        self._held.clear()
        return text

    def feed(self, ids: Iterable[int]) -> Iterator[str]:
        """The non-empty pieces of `ids`, held-back text last."""
        for token_id in ids:
            if piece := self.step(token_id):
                yield piece
        if rest := self.finish():
            yield rest


class _Metadata:
    """Typed access to GGUF metadata, refusing a missing or ill-typed key with the file and key named."""

    def __init__(self, metadata: Mapping[str, object], source: str) -> None:
        self.metadata = metadata
        self.source = source

    def fail(self, key: str, problem: str) -> NoReturn:
        raise TokenizerError(f"tokenizer in {self.source}: key '{key}' {problem}")

    def _required(self, key: str) -> object:
        if key not in self.metadata:
            self.fail(key, "is missing (the file carries no tokenizer, or an incomplete one)")
        return self.metadata[key]

    def text(self, key: str) -> str:
        value = self._required(key)
        if not isinstance(value, str):
            self.fail(key, f"should be a string, not {_kind(value)}")
        return value

    def flag(self, key: str) -> bool:
        value = self.metadata.get(key, False)
        if not isinstance(value, bool):
            self.fail(key, f"should be a bool, not {_kind(value)}")
        return value

    def strings(self, key: str) -> list[str]:
        value = self._required(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, f"should be an array of strings, not {_kind(value)}")
        return value

    def integers(self, key: str, count: int) -> list[int]:
        """The array at `key`, one integer per token; absent reads as empty."""
        value = self.metadata.get(key, [])
        if value == []:
            return []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            self.fail(key, f"should be an array of integers, not {_kind(value)}")
        if len(value) != count:
            self.fail(key, f"has {len(value)} entries for {count} tokens")
        return value

    def framing(self, end: str, wanted: bool, token_id: int | None, tokens: list[str]) -> list[str]:
        """The `TemplateProcessing` piece adding the `end` ("bos"/"eos") token, if the metadata wants it."""
        if not wanted:
            return []
        if token_id is None:
            self.fail(f"tokenizer.ggml.{end}_token_id", f"is missing, but tokenizer.ggml.add_{end}_token is true")
        return [f"{tokens[token_id]}:0"]

    def token_id(self, key: str, count: int) -> int | None:
        value = self.metadata.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(key, f"should be an integer, not {_kind(value)}")
        if not 0 <= value < count:
            self.fail(key, f"is {value}, outside the vocabulary (ids 0 to {count - 1})")
        return value


def _kind(value: object) -> str:
    if isinstance(value, list):
        kinds = sorted({type(v).__name__ for v in value})
        return f"an array of {'/'.join(kinds) or 'nothing'}"
    return f"a {type(value).__name__} ({value!r:.40})"


def _vocabulary(keys: _Metadata, tokens: list[str]) -> dict[str, int]:
    if not tokens:
        keys.fail("tokenizer.ggml.tokens", "is empty")
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        first = vocab.setdefault(token, index)
        if first != index:
            keys.fail("tokenizer.ggml.tokens", f"holds {token!r} twice (ids {first} and {index})")
    return vocab


def _merges(keys: _Metadata, vocab: Mapping[str, int]) -> list[tuple[str, str]]:
    merges = []
    for index, merge in enumerate(keys.strings("tokenizer.ggml.merges")):
        parts = merge.split(" ")
        if len(parts) != 2 or not all(parts):
            keys.fail("tokenizer.ggml.merges", f"entry {index} ({merge!r}) is not two tokens separated by one space")
        for token in (*parts, parts[0] + parts[1]):
            if token not in vocab:
                keys.fail("tokenizer.ggml.merges", f"entry {index} ({merge!r}) needs {token!r}, not in the vocabulary")
        merges.append((parts[0], parts[1]))
    return merges


def _check_ids(engine: tokenizers.Tokenizer, path: Path) -> None:
    """Refuse a token (of the vocabulary or added) whose id leaves a gap among the tokenizer's ids: the
    engine fills the gap when it writes itself out (a 2^31 id asks for 4 GiB; a failed allocation aborts)."""
    size = engine.get_vocab_size(with_added_tokens=True)
    for token, token_id in engine.get_vocab(with_added_tokens=True).items():
        if token_id >= size:
            raise TokenizerError(f"tokenizer {path}: token {token!r} has id {token_id}, past its {size} ids")


def _check_post_processor(processor: object, size: int, path: Path, where: str = "post_processor") -> None:
    """Refuse a template that adds a special token its own `special_tokens` map does not define (`tokenizers`
    reads it, then panics on every encode), or one whose ids are not among the tokenizer's `size` ids (as
    `_check_ids` refuses a token's)."""
    if not isinstance(processor, dict):
        return
    if processor.get("type") == "Sequence":
        for i, inner in enumerate(processor.get("processors") or []):
            _check_post_processor(inner, size, path, f"{where}.processors[{i}]")
    if processor.get("type") != "TemplateProcessing":
        return
    defined = processor.get("special_tokens")
    for key, entry in defined.items() if isinstance(defined, dict) else ():
        ids = entry.get("ids") if isinstance(entry, dict) else None
        for token_id in ids if isinstance(ids, list) else ():
            if not isinstance(token_id, int) or not 0 <= token_id < size:
                raise TokenizerError(
                    f"tokenizer {path}: {where}.special_tokens[{key!r}] has id {token_id!r}, not one of its {size} ids"
                )
    for part in ("single", "pair"):
        for i, piece in enumerate(processor.get(part) or []):
            special = piece.get("SpecialToken") if isinstance(piece, dict) else None
            if isinstance(special, dict) and (not isinstance(defined, dict) or special.get("id") not in defined):
                raise TokenizerError(
                    f"tokenizer {path}: {where}.{part}[{i}] adds special token {special.get('id')!r}, "
                    "which its 'special_tokens' do not define"
                )


def _tokenizer_config(path: Path) -> dict[str, object]:
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"tokenizer config {path}: cannot read it: {e}") from None
    if not isinstance(config, dict):
        raise TokenizerError(f"tokenizer config {path}: is not a JSON object")
    return config


def _config_token_id(engine: tokenizers.Tokenizer, config: Mapping[str, object], name: str, path: Path) -> int | None:
    value = config.get(name)
    text = value.get("content") if isinstance(value, dict) else value
    if text is None:
        return None
    token_id = engine.token_to_id(text) if isinstance(text, str) else None
    if token_id is None:
        raise TokenizerError(f"tokenizer {path}: tokenizer_config.json names {name} {text!r}, which is not a token")
    return token_id


# What transformers gives chat templates beyond jinja2's own, so templates written for it render alike.
def _tojson(value: object, ensure_ascii: bool = False, indent: int | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)


def _raise_from_template(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)
