"""Credentials: whether an API key is usable, and keeping secrets out of everything printed.

`api_key_problem` vets a key before any request is made; its reason never quotes the key.
`Redactor` replaces secrets in finished text and in values about to be JSON-encoded;
`StreamRedactor` does the same for text that arrives in pieces (model deltas), holding back
just enough that a secret split across two pieces is never released whole;
`ByteStreamRedactor` does it for bytes of any encoding that arrive in pieces (a response
body on its way to a client), and `Redactor.redact_bytes` for bytes already whole.
"""

from __future__ import annotations

import hmac
import json
import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "MIN_KEY_CHARS",
    "REDACTED",
    "ByteStreamRedactor",
    "Redactor",
    "StreamRedactor",
    "api_key_problem",
    "key_variable_problem",
    "same_secret",
]

REDACTED = "[redacted]"
MIN_KEY_CHARS = 4

# Unicode categories a key must not contain: controls, format characters (zero-width and
# bidi marks) and every kind of separator (spaces, line and paragraph separators).
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs"})


def api_key_problem(key: str) -> str | None:
    """None if `key` can be sent and kept out of output, else a one-line reason.

    The reason is fixed text: it never quotes the key, a character of it, or its position,
    so it is safe to print. A key shorter than `MIN_KEY_CHARS` is refused because redacting
    it would mangle ordinary output (and it cannot be a real key); whitespace or controls
    would corrupt the `Authorization` header or hide in a copied value; non-ASCII characters
    cannot travel in an HTTP header at all.
    """
    if not key:
        return "the API key is empty"
    if len(key) < MIN_KEY_CHARS:
        return f"the API key is too short to be kept out of output (under {MIN_KEY_CHARS} chars)"
    if any(char.isspace() or unicodedata.category(char) in _FORBIDDEN_CATEGORIES for char in key):
        return "the API key contains whitespace or control characters"
    if not key.isascii():
        return "the API key contains non-ASCII characters, which HTTP headers cannot carry"
    return None


# Variables that hold the system's own settings, never an API key: naming one as a key's
# variable (`--api-key-env`, a config file's `key: {env: NAME}`) would send its value as the
# credential (and remove it from the environment of every tool the run starts).
_SYSTEM_VARIABLES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TERM", "LANG",
        "LANGUAGE", "TMPDIR", "TMP", "TEMP", "TZ", "DISPLAY", "EDITOR", "VISUAL", "PAGER",
        "MAIL", "HOSTNAME", "SHLVL", "IFS", "CDPATH", "MANPATH", "LD_LIBRARY_PATH",
        "LD_PRELOAD", "VIRTUAL_ENV", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
        "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
    }
)  # fmt: skip
_SYSTEM_PREFIXES = ("LC_", "XDG_", "SSH_", "PYTHON", "LOCKGATE_RETRY_")


def key_variable_problem(name: str) -> str | None:
    """None if the environment variable `name` may hold a key or a token, else a one-line
    reason: one of the system's own (`PATH`, `HOME`, `LC_*` …, any letter case)."""
    upper = name.upper()
    if upper in _SYSTEM_VARIABLES or upper.startswith(_SYSTEM_PREFIXES):
        return (
            f"{name} is a system variable, not an API key: its value would be sent as the "
            "credential"
        )
    return None


def same_secret(first: str, second: str) -> bool:
    """Whether two secrets are equal, compared in constant time."""
    return hmac.compare_digest(
        first.encode("utf-8", "surrogateescape"), second.encode("utf-8", "surrogateescape")
    )


def _forms(secret: str) -> set[str]:
    """Every way lockgate may print the secret: raw, inside a JSON string (both encodings),
    and inside a Python `repr` or `ascii` (what `{value!r}` and `{value!a}` write: backslashes
    doubled, a quote escaped or not, depending on the quotes the whole string needs)."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    for quoted in (repr(secret), ascii(secret)):
        inner = quoted[1:-1]
        forms.add(inner)
        # The quote `repr` escapes depends on the string around the secret too: both ways.
        if quoted[0] == "'":
            forms.add(inner.replace("\\'", "'"))
        else:
            forms.add(inner.replace("'", "\\'"))
    return forms


class Redactor:
    """Replaces every occurrence of each secret with `[redacted]`.

    Empty secrets are ignored; every other secret is redacted whatever its length. Each
    secret's escaped forms are redacted too: JSON's (a `"` as `\\"`, a `\\` as `\\\\`,
    non-ASCII as `\\uXXXX`) and Python's `repr`/`ascii` (a `'` as `\\'` or not), so text
    that quotes a value with `!r` or was already JSON-encoded is still safe. Matching is one
    left-to-right pass in which, at each position, the longest matching secret wins.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms |= _forms(secret)
        self._use(forms)

    def _use(self, forms: set[str]) -> None:
        ordered = sorted(forms, key=lambda form: (-len(form), form))
        self._forms = tuple(ordered)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        # The forms a stream may have to hold back the start of (those with proper prefixes).
        # Found by scanning for their first character, not by listing every prefix: that
        # list grows with the square of the key's length (a 8,000-character value took
        # 44 s and 3 GB to prepare).
        self._holdable = tuple(form for form in ordered if len(form) > 1)
        self._of_bytes: Redactor | None = None

    def _bytes(self) -> Redactor:
        """The redactor of the same secrets in bytes, as latin-1 text (one character per
        byte): each form's UTF-8 bytes, and with every `/` written `\\/` too (the escape
        some JSON encoders write)."""
        if self._of_bytes is None:
            forms: set[str] = set()
            for form in self._forms:
                raw = form.encode("utf-8", "surrogatepass").decode("latin-1")
                forms.add(raw)
                if "/" in raw:
                    forms.add(raw.replace("/", "\\/"))
            of_bytes = Redactor()
            of_bytes._use(forms)
            self._of_bytes = of_bytes
        return self._of_bytes

    def __call__(self, text: str) -> str:
        """`text` with every secret replaced."""
        if self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)

    def redact_value(self, value: object) -> object:
        """`value` with every string inside it redacted: dict keys and values, list and tuple
        items, recursively. Used before JSON encoding, so the encoder never sees a secret."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self.redact_value(key): self.redact_value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.redact_value(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.redact_value(item) for item in value)
        return value

    def stream(self) -> StreamRedactor:
        """A fresh redactor for one stream of text arriving in pieces."""
        return StreamRedactor(self)

    def redact_bytes(self, data: bytes) -> bytes:
        """`data` (bytes in any encoding, or none) with every secret's bytes replaced."""
        if self._pattern is None:
            return data
        return self._bytes()(data.decode("latin-1")).encode("latin-1")

    def bytes_stream(self) -> ByteStreamRedactor:
        """A fresh redactor for one stream of bytes arriving in pieces."""
        return ByteStreamRedactor(self)


class StreamRedactor:
    """Redacts text that arrives in pieces, exactly as `Redactor` would redact the whole.

    `feed` releases what is certain and holds back the longest suffix that is a proper
    prefix of a secret (it may still complete with the next piece); `flush` releases the
    rest. For any split of a text into pieces, the released parts joined equal
    `Redactor(secrets)(text)`, so a secret split across pieces is never released whole.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._pattern = redactor._pattern
        self._holdable = redactor._holdable
        self._held = ""

    def feed(self, piece: str) -> str:
        """The redacted text that can be released now that `piece` arrived."""
        if self._pattern is None:
            return piece
        buffer = self._held + piece
        released: list[str] = []
        position = 0
        while True:
            hold = self._hold_start(buffer, position)
            match = self._pattern.search(buffer, position)
            # A match starting before `hold` is final: no longer secret can still match there.
            if match is None or match.start() >= hold:
                released.append(buffer[position:hold])
                self._held = buffer[hold:]
                return "".join(released)
            released.append(buffer[position : match.start()])
            released.append(REDACTED)
            position = match.end()

    def flush(self) -> str:
        """Everything still held, redacted; the stream starts afresh afterwards."""
        held, self._held = self._held, ""
        return self._pattern.sub(REDACTED, held) if self._pattern is not None else held

    def _hold_start(self, buffer: str, position: int) -> int:
        """Where the longest suffix of `buffer[position:]` that could begin a secret starts
        (`len(buffer)` when there is none)."""
        end = len(buffer)
        hold = end
        for form in self._holdable:
            first = form[0]
            # buffer[k:] must be shorter than the form: k > end - len(form).
            k = buffer.find(first, max(position, end - len(form) + 1), hold)
            while k >= 0:
                if form.startswith(buffer[k:]):
                    hold = k  # the earliest for this form; later forms may only beat it
                    break
                k = buffer.find(first, k + 1, hold)
        return hold


class ByteStreamRedactor:
    """Redacts bytes that arrive in pieces (a response body, in any encoding or none),
    exactly as `Redactor.redact_bytes` would redact the whole: a `StreamRedactor` over the
    bytes read as latin-1 (one character per byte), so that only a tail that could begin a
    secret is held back, and a secret split across pieces is never released whole."""

    def __init__(self, redactor: Redactor) -> None:
        self._text = StreamRedactor(redactor._bytes()) if redactor._pattern is not None else None

    def feed(self, piece: bytes) -> bytes:
        """The redacted bytes that can be released now that `piece` arrived."""
        if self._text is None:
            return piece
        return self._text.feed(piece.decode("latin-1")).encode("latin-1")

    def flush(self) -> bytes:
        """Everything still held, redacted; the stream starts afresh afterwards."""
        if self._text is None:
            return b""
        return self._text.flush().encode("latin-1")
