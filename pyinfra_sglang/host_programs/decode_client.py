"""Decode sanity prompt: ask a running SGLang server a question whose answer is known.

Streams a chat completion (SSE, parsed here by hand), then asks the same without streaming,
and checks both answers contain the expected word. Reports time to first token, tokens/s and
completion tokens, or a stable reason code for what went wrong.

Standard library only, Python 3.9+, no imports from pyinfra-sglang: the audit copies this
file to a temporary folder on a host and runs it there with the system python3
(``python3 decode_client.py --url URL --json``). Run so, it takes the API key from the
environment variable SGLANG_API_KEY (the audit sets it from the server's 0600 config file
with api_key.py), never from its command line; ``pyinfra-sglang decode-check`` reads it from
``--api-key-file``.

``--timeout`` bounds the whole check: every connection, send and read waits only for the time
left, so a server that trickles its bytes cannot stretch it. A line of a streamed answer is read
up to 1 MiB, an answer up to 8 MiB (beyond: protocol-error). Whatever a server sends has the API
key masked before any of it is cut short for a message, and a URL's user and password
(``http://user:pass@host``) are neither sent nor printed.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import math
import os
import re
import socket
import ssl
import sys
import threading
import time
from typing import Callable, Iterable, Iterator
from urllib.parse import urlsplit

DEFAULT_PROMPT = "What is the capital of France? Answer in one word."
DEFAULT_EXPECT = "Paris"
EMPTY_EXPECT = (
    "the expected word must hold a letter or digit: an empty one is in every answer, so the "
    "check could not fail"
)
# For the whole check: the health probe, the model listing and both answers.
DEFAULT_TIMEOUT_S = 300.0
# Room for a reasoning model to think before it answers.
DEFAULT_MAX_TOKENS = 1024
REASONS = (
    "pass",
    "connection-refused",
    "loading",
    "timeout",
    "unauthorized",
    "http-error",
    "protocol-error",
    "empty-output",
    "degenerate-output",
    "wrong-answer",
)
ANSWER_CHARS = 200
ERROR_CHARS = 200  # of an error body, quoted in the message (after the key is masked)
MIB = 1 << 20
MAX_LINE_BYTES = MIB  # one line of a streamed answer
MAX_BODY_BYTES = 8 * MIB  # one answer, streamed or not
READ_BYTES = 64 * 1024  # a body is read in pieces of this size
MASK = "********"
# Failures of the streamed call that the non-streamed one would only repeat.
UNREACHED = ("connection-refused", "loading", "timeout", "unauthorized")
SSE_FIELDS = ("data", "event", "id", "retry")
CHAT_PATH = "/v1/chat/completions"
API_KEY_ENV = "SGLANG_API_KEY"


class CheckFailed(Exception):
    """A failure with its reason code; the text never holds the API key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class ProtocolError(CheckFailed):
    def __init__(self, detail: str):
        super().__init__("protocol-error", detail)


# --- parsing -------------------------------------------------------------------------------


def sse_events(lines: Iterable[bytes]) -> Iterator[object]:
    """The data of each server-sent event: a JSON object (dict), or the string "[DONE]".

    Lines may end in LF or CRLF; data lines of one event are joined, a blank line ends it;
    comment lines (":" first, the keep-alives of proxies) and event/id/retry fields are
    skipped. Anything else, bad UTF-8 or JSON that is not an object raises ProtocolError.
    """
    data: list[str] = []
    for raw in lines:
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise ProtocolError("the stream is not UTF-8") from None
        if line.startswith(":"):
            continue
        if line:
            name, _, value = line.partition(":")
            if name not in SSE_FIELDS:
                raise ProtocolError(f"not an SSE line: {line[:80]!r}")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
            continue
        if data:
            yield _event("\n".join(data))
            data = []
    if data:  # the last event lacked its blank line: take it anyway
        yield _event("\n".join(data))


def _event(text: str) -> object:
    if text.strip() == "[DONE]":
        return "[DONE]"
    try:
        value = json.loads(text)
    except ValueError:
        raise ProtocolError(f"an event is not JSON: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"an event is not a JSON object: {text[:80]!r}")
    return value


def _text(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ProtocolError(f"{where} is not a string: {value!r:.80}")
    return value


def _server_error(event: dict) -> str:
    error = event["error"]
    message = error.get("message") if isinstance(error, dict) else error
    return f"the server reported an error: {str(message)[:200]}"


def read_stream(
    lines: Iterable[bytes], sent: float, clock: Callable[[], float] = time.monotonic
) -> dict:
    """Read a streamed chat completion from its raw lines; ``sent`` is the clock() reading
    when the request went out.

    Returns content and reasoning (``reasoning_content`` deltas, kept apart), ttft_s (to the
    first content or reasoning token), tokens_per_s (tokens after the first over the time
    after it: the first token's time is the TTFT), completion_tokens (from the usage chunk,
    else the count of token chunks), chunks, finish_reason and usage_reported. Raises
    ProtocolError for a malformed stream or one without ``data: [DONE]``, and CheckFailed
    (http-error) when the server sends an error event.
    """
    content: list[str] = []
    reasoning: list[str] = []
    first = last = None
    chunks = 0
    usage = None
    finish_reason = None
    done = False
    for event in sse_events(lines):
        now = clock()
        if done:
            raise ProtocolError("data after data: [DONE]")
        if event == "[DONE]":
            done = True
            continue
        if "error" in event:
            raise CheckFailed("http-error", _server_error(event))
        if isinstance(event.get("usage"), dict):
            usage = event["usage"]
        choices = event.get("choices")
        choices = [] if choices is None else choices
        if not isinstance(choices, list):
            raise ProtocolError("choices is not a list")
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                raise ProtocolError("a choice has no delta object")
            piece = _text(delta.get("content"), "delta.content")
            thought = _text(delta.get("reasoning_content"), "delta.reasoning_content")
            content.append(piece)
            reasoning.append(thought)
            if piece or thought:
                first = now if first is None else first
                last = now
                chunks += 1
            finish_reason = choice.get("finish_reason") or finish_reason
    if not done:
        raise ProtocolError("the stream ended without data: [DONE]")
    tokens = usage.get("completion_tokens") if usage else None
    tokens = tokens if isinstance(tokens, int) else chunks
    rate = None
    if first is not None and last > first and tokens > 1:
        rate = (tokens - 1) / (last - first)
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "ttft_s": None if first is None else first - sent,
        "tokens_per_s": rate,
        "completion_tokens": tokens,
        "chunks": chunks,
        "finish_reason": finish_reason,
        "usage_reported": usage is not None,
    }


def read_completion(body: bytes) -> dict:
    """content, reasoning, completion_tokens and finish_reason of a non-streamed answer."""
    try:
        value = json.loads(body)
        choice = value["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProtocolError(f"the answer is not a chat completion: {body[:80]!r}") from None
    usage = value.get("usage") if isinstance(value.get("usage"), dict) else {}
    tokens = usage.get("completion_tokens")
    return {
        "content": _text(message.get("content"), "message.content"),
        "reasoning": _text(message.get("reasoning_content"), "message.reasoning_content"),
        "completion_tokens": tokens if isinstance(tokens, int) else None,
        "finish_reason": choice.get("finish_reason"),
    }


def degenerate_reason(text: str) -> str | None:
    """Why ``text`` looks like the garbage a model decodes when its numbers went bad (NaN or
    inf logits, a wrong kernel, broken quantization), or None when it does not.

    Two rules, for text of at least 8 non-blank characters:
    - more than a third of its non-blank characters are U+FFFD (the replacement character)
      or not printable;
    - one unit of 1 to 8 characters, not blank and not only digits (numbers repeat digits),
      repeated at least 8 times back to back ("!!!!!!!!", "<unk><unk>...", "the the the
      ..."), makes up at least half of the text.
    """
    stripped = text.strip()
    visible = [c for c in stripped if not c.isspace()]
    if len(visible) < 8:
        return None
    bad = sum(1 for c in visible if c == "\ufffd" or not c.isprintable())
    if bad * 3 > len(visible):
        return f"{bad} of {len(visible)} characters are non-printable or replacement characters"
    for match in re.finditer(r"(.{1,8}?)\1{7,}", stripped, re.DOTALL):
        unit = match.group(1)
        span = len(match.group(0))
        if unit.strip() and not unit.strip().isdigit() and 2 * span >= len(stripped):
            return f"{unit!r} repeated {span // len(unit)} times"
    return None


def contains_word(text: str, word: str) -> bool:
    """Is ``word`` in ``text`` as a word of its own, any case ("Paris." yes, "Parisian" no)?"""
    return re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", text, re.IGNORECASE) is not None


def judge(content: str, reasoning: str, expect: str) -> tuple[str, str]:
    """(reason, what was found) for an answer: pass, empty-output, degenerate-output or
    wrong-answer. The expected word is looked for in the content only."""
    if not content.strip() and not reasoning.strip():
        return "empty-output", "the model answered nothing"
    for name, text in (("answer", content), ("reasoning", reasoning)):
        why = degenerate_reason(text)
        if why:
            return "degenerate-output", f"the {name} is garbage: {why} ({_short(text, 60)})"
    if not content.strip():
        return "empty-output", (
            f"the answer is empty after {len(reasoning)} characters of reasoning (the model "
            "may have spent max_tokens thinking)"
        )
    if not contains_word(content, expect):
        return "wrong-answer", f"the answer {_short(content, 120)} lacks {expect!r}"
    return "pass", f"answered {_short(content, 120)}"


def _short(text: str, limit: int) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# --- HTTP ----------------------------------------------------------------------------------


class _Deadline:
    """The moment the whole check must be over; every wait is cut at it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; socket.timeout once there are none."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise socket.timeout(f"the check's {self.seconds:g} s ran out")
        return left


def _resolve(host: str, port: int, deadline: _Deadline) -> list:
    """getaddrinfo, waited for until the deadline only (a lookup cannot be told to stop: it
    runs on in a daemon thread)."""
    found: list = []

    def look_up() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
        except BaseException as error:  # handed to the waiting thread
            found.append(error)

    worker = threading.Thread(target=look_up, name="decode-check-lookup", daemon=True)
    worker.start()
    worker.join(deadline.left())
    if not found:
        raise socket.timeout(f"looking up {host} did not finish")
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


def _dial(host: str, port: int, deadline: _Deadline) -> socket.socket:
    """A TCP connection to the first address of ``host`` that takes one, before the deadline."""
    failure: OSError | None = None
    for family, kind, proto, _, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left())
            sock.connect(address)
            return sock
        except OSError as error:
            sock.close()
            failure = error
    raise failure or OSError(f"{host} has no address")


class _DeadlineSocket:
    """A connected socket whose every send and receive waits only for the time the check has
    left: a server trickling a byte at a time cannot stretch the check past its deadline. As
    with socket.makefile(), the socket stays open until it and its readers are all closed
    (http.client closes the connection of a Connection: close answer before reading it)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline):
        self._sock, self._deadline = sock, deadline
        self._readers = 0
        self._closed = False

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(self._deadline.left())
        self._sock.sendall(data)

    def recv_into(self, buffer) -> int:
        self._sock.settimeout(self._deadline.left())
        return self._sock.recv_into(buffer)

    def makefile(self, mode: str = "rb", *args, **kwargs) -> io.BufferedReader:
        if mode != "rb":
            raise ValueError(f"only binary reading, not {mode!r}")
        self._readers += 1
        return io.BufferedReader(_SocketReader(self))

    def reader_closed(self) -> None:
        self._readers -= 1
        if self._closed and self._readers <= 0:
            self._sock.close()

    def close(self) -> None:
        self._closed = True
        if self._readers <= 0:
            self._sock.close()

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class _SocketReader(io.RawIOBase):
    def __init__(self, sock: _DeadlineSocket):
        super().__init__()
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._sock.recv_into(buffer)

    def close(self) -> None:
        if not self.closed:
            self._sock.reader_closed()
        super().close()


class _Connection(http.client.HTTPConnection):
    """An HTTP or HTTPS connection whose every wait, from the name lookup and the TLS handshake
    to the last byte of the answer, ends at the check's deadline."""

    def __init__(self, parts, deadline: _Deadline):
        https = parts.scheme == "https"
        self.default_port = 443 if https else 80  # the Host header leaves the default out
        self.tls = ssl.create_default_context() if https else None
        self.deadline = deadline
        port = parts.port or self.default_port
        super().__init__(parts.hostname, port, timeout=deadline.seconds)

    def connect(self) -> None:
        sock = _dial(self.host, self.port, self.deadline)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock.settimeout(self.deadline.left())  # the whole handshake waits at most this
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock = _DeadlineSocket(sock, self.deadline)


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit} bytes"


def _masker(secrets: Iterable[str]) -> Callable[[bytes], bytes]:
    """A function masking each secret in bytes a server sent, as it is and as a JSON string
    holds it (a server may echo the key in a JSON error)."""
    forms: set[bytes] = set()
    for secret in secrets:
        forms.add(secret.encode("utf-8"))
        forms.add(json.dumps(secret)[1:-1].encode("utf-8"))
        forms.add(json.dumps(secret, ensure_ascii=False)[1:-1].encode("utf-8"))
        # Every character \u-escaped, as a JSON encoder may write it (lower and upper hex).
        escaped = "".join("\\u%04x" % ord(char) for char in secret if ord(char) < 0x10000)
        if len(escaped) == 6 * len(secret):
            forms.add(escaped.encode())
            forms.add(escaped.upper().replace("\\U", "\\u").encode())
    ordered = sorted((form for form in forms if form), key=len, reverse=True)

    def mask(data: bytes) -> bytes:
        for form in ordered:
            data = data.replace(form, MASK.encode())
        return data

    return mask


def shown_url(url: str) -> str:
    """``url`` as it may be printed: without the user and password of
    ``http://user:pass@host``."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url if "@" not in url else "(a URL holding an @, not shown)"
    ends = [index for index in (rest.find(c) for c in "/?#") if index >= 0]
    end = min(ends) if ends else len(rest)
    authority = rest[:end]
    if "@" not in authority:
        return url
    return f"{scheme}://{authority.rpartition('@')[2]}{rest[end:]}"


def _userinfo(url: str) -> list[str]:
    """The user:password of an http://user:pass@host URL and its parts (secrets to mask)."""
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    if "@" not in authority:
        return []
    userinfo = authority.rpartition("@")[0]
    return [part for part in (userinfo, *userinfo.split(":", 1)) if len(part) >= 3]


def _http_url(url: str):
    """urlsplit(url) for an http(s) URL with a host and a valid port; ValueError otherwise
    (its text without the URL's user and password)."""
    try:
        parts = urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(f"not an http(s) URL with a host and a valid port: {shown_url(url)!r}")
    return parts


class _Client:
    """Requests to one server, all of them done before one deadline."""

    def __init__(self, url: str, api_key: str | None, deadline: _Deadline):
        parts = _http_url(url)
        self.parts = parts
        # An OpenAI-style base URL ends in /v1; the paths below carry it themselves.
        self.prefix = re.sub(r"/v1/?$", "", parts.path.rstrip("/"))
        self.headers = {"Accept": "application/json, text/event-stream"}
        if api_key:
            # http.client's own error for a bad header would quote the key.
            if not api_key.isprintable():
                raise ValueError("the API key holds characters an HTTP header cannot carry")
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.deadline = deadline
        self.mask = _masker([api_key or "", *_userinfo(url)])

    def open(self, method: str, path: str, body: dict | None = None) -> _Reply:
        """The 200 answer to a request; CheckFailed for a refused connection, the deadline,
        401/403, 503 and any other status."""
        where = f"{method} {path}"
        headers, data = dict(self.headers), None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = None
        try:
            conn = _Connection(self.parts, self.deadline)
            conn.request(method, self.prefix + path, body=data, headers=headers)
            response = conn.getresponse()
        except BaseException as error:
            if conn is not None:
                conn.close()
            raise _transport_failure(error, where, self.deadline, self.mask) from None
        reply = _Reply(conn, response, where, self.deadline, self.mask)
        if response.status == 200:
            return reply
        if response.status in (401, 403, 503):
            reply.close()  # its body is not shown
            if response.status == 503:
                raise CheckFailed("loading", f"{where} answered 503: the server is not ready")
            raise CheckFailed(
                "unauthorized",
                f"{where} answered {response.status}: the API key is missing or wrong",
            )
        try:
            # Masked before it is cut: a cut key would not be found to mask.
            text = reply.read(cut=True).decode("utf-8", "replace")
        except CheckFailed:
            text = ""
        finally:
            reply.close()
        raise CheckFailed(
            "http-error", f"{where} answered {response.status}: {text[:ERROR_CHARS]!r}"
        )

    def get_json(self, path: str) -> object:
        reply = self.open("GET", path)
        try:
            body = reply.read()
        finally:
            reply.close()
        try:
            return json.loads(body)
        except ValueError:
            raise ProtocolError(f"GET {path} did not answer JSON: {body[:80]!r}") from None

    def probe_health(self) -> None:
        """GET /health: raises as open() does, except for statuses SGLang's /health never
        answers (a server or proxy without it), which let the check go on."""
        try:
            self.open("GET", "/health").close()
        except CheckFailed as failure:
            if failure.reason != "http-error":
                raise


class _Reply:
    """An open answer, read in bounded lines or a bounded body before the check's deadline;
    what it gives has the secrets masked."""

    def __init__(self, conn, response, where: str, deadline: _Deadline, mask):
        self.conn, self.response, self.where = conn, response, where
        self.deadline, self.mask = deadline, mask

    def _failure(self, error: BaseException) -> BaseException:
        return _transport_failure(error, self.where, self.deadline, self.mask)

    def lines(self) -> Iterator[bytes]:
        """The answer's lines, each at most MAX_LINE_BYTES, all of them MAX_BODY_BYTES."""
        total = 0
        while True:
            try:
                line = self.response.readline(MAX_LINE_BYTES + 1)
            except BaseException as error:
                raise self._failure(error) from None
            if not line:
                return
            if len(line) > MAX_LINE_BYTES:
                raise ProtocolError(
                    f"{self.where} sent a line longer than {_size(MAX_LINE_BYTES)}, the most "
                    "this check reads"
                )
            total += len(line)
            if total > MAX_BODY_BYTES:
                raise ProtocolError(
                    f"{self.where} sent more than {_size(MAX_BODY_BYTES)}, the most this "
                    "check reads"
                )
            yield self.mask(line)

    def read(self, cut: bool = False) -> bytes:
        """The body, at most MAX_BODY_BYTES (ProtocolError beyond, or the first ones when
        ``cut``)."""
        pieces, total = [], 0
        while total <= MAX_BODY_BYTES:
            try:
                piece = self.response.read(READ_BYTES)
            except BaseException as error:
                raise self._failure(error) from None
            if not piece:
                break
            pieces.append(piece)
            total += len(piece)
        if total > MAX_BODY_BYTES:
            if not cut:
                raise ProtocolError(
                    f"{self.where} answered more than {_size(MAX_BODY_BYTES)}, the most this "
                    "check reads"
                )
            pieces[-1] = pieces[-1][: len(pieces[-1]) - (total - MAX_BODY_BYTES)]
        return self.mask(b"".join(pieces))

    def close(self) -> None:
        # The answer holds the socket of a Connection: close answer, the connection not.
        self.response.close()
        self.conn.close()


def _transport_failure(
    error: BaseException, where: str, deadline: _Deadline, mask: Callable[[bytes], bytes]
) -> BaseException:
    """The CheckFailed for a socket or http.client error; other errors as they are."""
    if isinstance(error, (socket.timeout, TimeoutError)):
        return CheckFailed(
            "timeout",
            f"{where} did not finish within {deadline.seconds:g} s (the time the whole check "
            "may take)",
        )
    if isinstance(error, ConnectionRefusedError):
        return CheckFailed("connection-refused", f"{where} was refused: nothing listens there")
    if isinstance(error, http.client.HTTPException):  # before OSError: some are both
        # Their text may quote what the server sent (a status line, a header).
        text = mask(str(error).encode("utf-8", "replace")).decode("utf-8", "replace")
        return ProtocolError(f"{where} broke off ({type(error).__name__}: {text[:ERROR_CHARS]})")
    if isinstance(error, OSError):
        return CheckFailed("connection-refused", f"{where} could not connect ({error})")
    return error


# --- the check -----------------------------------------------------------------------------

ADVICE = {
    "connection-refused": "check that the SGLang service runs (systemctl status sglang) and "
    "that the URL's host and port are those it binds to",
    "loading": "wait until GET /health answers 200 (the model is loading or warming up; if it "
    "stays 503, read the service's log: journalctl -u sglang), then check again",
    "timeout": "the server may be stuck or overloaded: read its log (journalctl -u sglang), "
    "or give it longer with --timeout",
    "unauthorized": "pass the server's API key with --api-key-file (the key alone, or the "
    "server's config file, e.g. /etc/sglang/sglang.yaml)",
    "http-error": "read the server's log (journalctl -u sglang) for the request",
    "protocol-error": "this does not look like an OpenAI-compatible SGLang server: check the "
    "URL, and any proxy in front of it",
    "empty-output": "check the chat template and reasoning parser of the model profile",
    "degenerate-output": "the model decodes garbage, as with NaNs: check the quantization, "
    "attention backends and the GPUs (driver, memory errors)",
    "wrong-answer": "the server runs but answers wrongly: check the model path, quantization "
    "and chat template",
}


def decode_check(
    url: str,
    expect: str = DEFAULT_EXPECT,
    prompt: str = DEFAULT_PROMPT,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> dict:
    """Ask the server at ``url`` ``prompt``, streamed then not, and check that both answers
    contain ``expect``. ``timeout`` (seconds, finite, above 0; ValueError otherwise) bounds the
    whole check: when it runs out, the check stops with reason timeout.

    Returns a JSON-serializable dict: ok, reason (one of REASONS), message (what was
    expected, what was found, what to do), url, model, expect, prompt, answer (truncated),
    reasoning_chars, ttft_s, tokens_per_s, completion_tokens (of the streamed answer), and
    stream / non_stream sub-results (ok, reason, detail, answer and numbers; None when not
    made: non_stream is skipped when the server could not be reached). The API key appears
    nowhere in it, nor does the URL's user and password.
    """
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"the timeout must be a number of seconds above 0, not {timeout!r}")
    if not (isinstance(expect, str) and expect.strip()):
        raise ValueError(f"{EMPTY_EXPECT}, not {expect!r}")
    deadline = _Deadline(timeout)
    result = {
        "ok": False,
        "reason": None,
        "message": None,
        "url": shown_url(url),
        "model": model,
        "expect": expect,
        "prompt": prompt,
        "answer": None,
        "reasoning_chars": None,
        "ttft_s": None,
        "tokens_per_s": None,
        "completion_tokens": None,
        "stream": None,
        "non_stream": None,
    }
    advice = None
    try:
        client = _Client(url, api_key, deadline)
        client.probe_health()
        if model is None:
            model = _first_model(client.get_json("/v1/models"))
        result["model"] = model
        request = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        stream = _call(lambda: _streamed(client, request, expect))
        result["stream"] = stream
        if stream["ok"] or stream["reason"] not in UNREACHED:
            result["non_stream"] = _call(lambda: _non_streamed(client, request, expect))
        for key in ("answer", "reasoning_chars", "ttft_s", "tokens_per_s", "completion_tokens"):
            result[key] = stream.get(key)
        parts = (("streamed", stream), ("non-streamed", result["non_stream"]))
        failed = [(name, part) for name, part in parts if part and not part["ok"]]
        if failed:
            name, part = failed[0]
            reason, detail = part["reason"], f"{part['detail']} (the {name} call)"
        else:
            reason, detail = "pass", ""
    except CheckFailed as failure:
        reason, detail = failure.reason, failure.detail
    except ValueError as error:  # a bad URL or key, before any request
        reason, detail = "http-error", str(error)
        advice = "fix the URL or the API key file"
    result["ok"] = reason == "pass"
    result["reason"] = reason
    result["message"] = _message(result, reason, detail, advice)
    return _redacted(result, [api_key or "", *_userinfo(url)])


def _first_model(listing: object) -> str:
    try:
        return str(listing["data"][0]["id"])  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        raise ProtocolError(f"GET /v1/models lists no model: {str(listing)[:120]}") from None


def _call(step: Callable[[], dict]) -> dict:
    try:
        return step()
    except CheckFailed as failure:
        return {"ok": False, "reason": failure.reason, "detail": failure.detail}


def _verdict(answer: dict, expect: str) -> dict:
    reason, detail = judge(answer["content"], answer["reasoning"], expect)
    content = answer["content"]
    part = {
        "ok": reason == "pass",
        "reason": reason,
        "detail": detail,
        "answer": content if len(content) <= ANSWER_CHARS else content[:ANSWER_CHARS] + "...",
        "reasoning_chars": len(answer["reasoning"]),
    }
    part.update((k, v) for k, v in answer.items() if k not in ("content", "reasoning"))
    for key, places in (("ttft_s", 4), ("elapsed_s", 4), ("tokens_per_s", 2)):
        if part.get(key) is not None:
            part[key] = round(part[key], places)
    return part


def _streamed(client: _Client, request: dict, expect: str) -> dict:
    body = dict(request, stream=True, stream_options={"include_usage": True})
    sent = time.monotonic()
    reply = client.open("POST", CHAT_PATH, body)
    try:
        kind = reply.response.getheader("Content-Type", "")
        if not kind.startswith("text/event-stream"):
            raise ProtocolError(f"the answer is {kind or 'untyped'}, not text/event-stream")
        answer = read_stream(reply.lines(), sent)
    finally:
        reply.close()
    answer["elapsed_s"] = time.monotonic() - sent
    return _verdict(answer, expect)


def _non_streamed(client: _Client, request: dict, expect: str) -> dict:
    sent = time.monotonic()
    reply = client.open("POST", CHAT_PATH, request)
    try:
        body = reply.read()
    finally:
        reply.close()
    answer = read_completion(body)
    answer["elapsed_s"] = time.monotonic() - sent
    return _verdict(answer, expect)


# Characters a terminal may act on: C0 (tab and newline too: the summary is one line), DEL,
# C1, and the line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def safe_text(text: str) -> str:
    """``text`` with every control character shown as repr() escapes it (ESC as ``\\x1b``), so
    that what a server sent cannot move the cursor, retitle or clear a terminal."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def _message(result: dict, reason: str, detail: str, advice: str | None = None) -> str:
    server = result["url"] + (f" ({result['model']})" if result["model"] else "")
    if reason == "pass":
        text = (
            f"{server} answered {result['answer']!r} to {result['prompt']!r}, containing "
            f"{result['expect']!r}, streamed and not."
        )
    else:
        advice = advice or ADVICE[reason]
        text = (
            f"Expected {server} to answer {result['prompt']!r} with {result['expect']!r}, "
            f"but {detail}. {advice[0].upper()}{advice[1:]}."
        )
    return safe_text(text)


def _redacted(value, secrets: list[str]):
    """``value`` with every string's copy of a secret masked, as it is or as repr() shows it.
    What the server sent is masked as it arrives; this is the last guard."""
    forms = sorted({f for s in secrets if s for f in (s, repr(s)[1:-1])}, key=len, reverse=True)
    if not forms:
        return value
    if isinstance(value, str):
        for form in forms:
            value = value.replace(form, MASK)
        return value
    if isinstance(value, dict):
        return {key: _redacted(item, secrets) for key, item in value.items()}
    if isinstance(value, list):
        return [_redacted(item, secrets) for item in value]
    return value


# --- command line --------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        type=_url_argument,
        required=True,
        help="the server's base URL, e.g. http://127.0.0.1:30000",
    )
    parser.add_argument(
        "--expect",
        type=_expected_word,
        default=DEFAULT_EXPECT,
        metavar="WORD",
        help=f"word the answer must contain (default {DEFAULT_EXPECT})",
    )
    parser.add_argument(
        "--prompt",
        default=DEFAULT_PROMPT,
        metavar="P",
        help=f"question to ask (default {DEFAULT_PROMPT!r})",
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="M",
        help="model name (default: the first GET /v1/models lists)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds the whole check may take, all its requests together, above 0 "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _url_argument(text: str) -> str:
    """A --url: an http(s) URL (argparse's own message would quote it, user and password)."""
    try:
        _http_url(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _expected_word(text: str) -> str:
    """An --expect: a word to find. An empty one is found in any answer: a check that cannot
    fail."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{EMPTY_EXPECT}, not {text!r}")
    return text.strip()


def _seconds(text: str) -> float:
    """A --timeout: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def run(args: argparse.Namespace, api_key: str | None = None) -> int:
    """Run the check for parsed arguments: 0 pass, 1 fail."""
    result = decode_check(
        args.url,
        expect=args.expect,
        prompt=args.prompt,
        model=args.model,
        api_key=api_key,
        timeout=args.timeout,
    )
    print(json.dumps(result, indent=2) if args.json else summary_line(result))
    return 0 if result["ok"] else 1


def summary_line(result: dict) -> str:
    """One line: PASS or FAIL, the reason, TTFT, tokens/s and tokens, then the message."""
    ttft, rate, tokens = result["ttft_s"], result["tokens_per_s"], result["completion_tokens"]
    numbers = (
        f"ttft {'-' if ttft is None else f'{ttft:.3f} s'}, "
        f"{'-' if rate is None else f'{rate:.1f}'} tok/s, "
        f"{'-' if tokens is None else tokens} tokens"
    )
    verdict = "PASS" if result["ok"] else "FAIL"
    return safe_text(f"{verdict} {result['reason']} ({numbers}): {result['message']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="decode-check", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv), api_key=os.environ.get(API_KEY_ENV) or None)


if __name__ == "__main__":
    sys.exit(main())
