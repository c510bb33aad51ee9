"""Canned OpenAI chat completions: deterministic answers, one word per token."""

from __future__ import annotations

import re
import time
import uuid

PARIS = "The capital of France is Paris."
WRONG = "The capital of France is Lyon."  # what a `wrong/...` model answers
GARBAGE_TOKENS = 64  # a `garbage/...` model's "!" tokens, as a model with NaN logits emits
DEFAULT_ANSWER = "This is a canned answer from the SGLang test stand-in."
THINKING = "The user asks a question. I will answer it briefly."


class BadRequest(ValueError):
    pass


def text_of(content) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    raise BadRequest("message content must be a string or a list of parts")


def tokens(text: str) -> list[str]:
    """Words as tokens: the first bare, each later one with its leading space."""
    words = text.split()
    return [word if index == 0 else " " + word for index, word in enumerate(words)]


class Completion:
    """One request's answer, worked out before any of it is sent."""

    def __init__(self, request: dict, model: str, reasoning: bool, model_path: str = ""):
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        texts = []
        last_user = ""
        for message in messages:
            if not isinstance(message, dict) or "role" not in message:
                raise BadRequest("each message needs a role")
            text = text_of(message.get("content"))
            texts.append(text)
            if message["role"] == "user":
                last_user = text
        answer = PARIS if re.search(r"france", last_user, re.IGNORECASE) else DEFAULT_ANSWER
        if model_path.startswith("wrong/") and answer == PARIS:
            answer = WRONG
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise BadRequest("max_tokens must be a positive integer")
        self.reasoning = tokens(THINKING) if reasoning else []
        content = tokens(answer)
        if model_path.startswith("garbage/"):
            # Broken numerics decode one token over and over, and never think or stop.
            self.reasoning, content = [], ["!"] * GARBAGE_TOKENS
        if limit is not None and request.get("ignore_eos"):
            # bench_serving asks for exactly max_tokens: repeat the answer.
            while len(self.reasoning) + len(content) < limit:
                content += tokens(" " + answer)
        self.finish_reason = "stop"
        if limit is not None and len(self.reasoning) + len(content) > limit:
            keep_reasoning = min(len(self.reasoning), limit)
            self.reasoning = self.reasoning[:keep_reasoning]
            content = content[: limit - keep_reasoning]
            self.finish_reason = "length"
        elif limit is not None and request.get("ignore_eos"):
            self.finish_reason = "length"
        self.content = content
        self.model = request.get("model") or model
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.created = int(time.time())
        self.prompt_tokens = sum(len(text.split()) for text in texts) + 4 * len(texts)
        self.completion_tokens = len(self.reasoning) + len(self.content)

    def usage(self) -> dict:
        # Real 0.5.17's fields and order (tests/fixtures/sglang-0.5.17-h200/tiny).
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": None,
            "reasoning_tokens": len(self.reasoning),
        }

    def response(self) -> dict:
        message = {
            "role": "assistant",
            "content": "".join(self.content),
            "reasoning_content": "".join(self.reasoning) or None,
            "tool_calls": None,
        }
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                    "matched_stop": None,
                },
            ],
            "usage": self.usage(),
            "metadata": {"weight_version": "default"},
        }

    def chunk(self, delta: dict, finish_reason=None, usage=None) -> dict:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    # Real 0.5.17 names reasoning_content in every delta, null when none.
                    "delta": {"reasoning_content": None, **delta},
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "matched_stop": None,
                }
            ],
        }
        if usage is not None:
            chunk["choices"] = []
            chunk["usage"] = usage
        return chunk

    def stream(self, include_usage: bool):
        """The chunks of a streamed answer, in order; None marks where a token's time goes."""
        deltas = [{"reasoning_content": token} for token in self.reasoning]
        deltas += [{"content": token} for token in self.content]
        # As real 0.5.17: a first chunk with the role and empty content, before any token.
        yield self.chunk({"role": "assistant", "content": ""})
        for delta in deltas:
            yield None
            yield self.chunk(delta)
        yield self.chunk({}, finish_reason=self.finish_reason)
        if include_usage:
            yield self.chunk({}, usage=self.usage())
