"""pyinfra_sglang.redact: secrets out of the journal tail and outputs the tool prints."""

from __future__ import annotations

import json

import pytest

from pyinfra_sglang.redact import redact

M = "********"
API_KEY = "sk-live-0123456789abcdef"
HF = "hf_" + "A1b2C3d4" * 5  # the shape of a real token: hf_ and 34+ letters and digits


# SGLang's own start line, as `logger.info(f"{server_args=}")` prints the dataclass (older
# releases) and as newer ones print the resolved dict (sgl-project/sglang#37457).
SERVER_ARGS_REPR = (
    "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
    "tokenizer_path='Qwen/Qwen3-8B', skip_tokenizer_init=False, "
    f"api_key='{API_KEY}', admin_api_key='adm-SECRET-1', served_model_name='qwen', "
    "max_prefill_tokens=16384, hf_token=None, tp_size=2)"
)
SERVER_ARGS_DICT = (
    "server_args={'model_path': 'Qwen/Qwen3-8B', 'api_key': "
    f"'{API_KEY}', 'admin_api_key': \"adm-SECRET-2\", 'tp_size': 2, 'hf_token': None}}"
)


def test_server_args_repr_keeps_everything_but_the_keys():
    out = redact(SERVER_ARGS_REPR)
    assert API_KEY not in out and "adm-SECRET-1" not in out
    assert f"api_key='{M}'" in out and f"admin_api_key='{M}'" in out
    for kept in (
        "model_path='Qwen/Qwen3-8B'",
        "tokenizer_path='Qwen/Qwen3-8B'",
        "skip_tokenizer_init=False",
        "served_model_name='qwen'",
        "max_prefill_tokens=16384",
        "hf_token=None",  # not set: nothing to hide, and it says so
        "tp_size=2",
    ):
        assert kept in out


def test_server_args_dict_form():
    out = redact(SERVER_ARGS_DICT)
    assert API_KEY not in out and "adm-SECRET-2" not in out
    assert f"'api_key': '{M}'" in out and f"'admin_api_key': \"{M}\"" in out
    assert "'model_path': 'Qwen/Qwen3-8B'" in out and "'hf_token': None" in out


@pytest.mark.parametrize(
    "line, secret",
    [
        ('api_key="sk-double-quoted"', "sk-double-quoted"),
        ("hf_token='hf_short_but_named'", "hf_short_but_named"),
        ('{"hf_token": "hf_in_json_123"}', "hf_in_json_123"),
        ('api-key: "sk-from-yaml"', "sk-from-yaml"),
        ("api-key: sk-bare-yaml", "sk-bare-yaml"),
        ("HF_TOKEN=hf_env_file_value", "hf_env_file_value"),
        ("Environment: HUGGING_FACE_HUB_TOKEN=abcdef123", "abcdef123"),
        ("python -m sglang.launch_server --api-key sk-on-argv --port 1", "sk-on-argv"),
        ("python -m sglang.launch_server --api-key=sk-joined --port 1", "sk-joined"),
        ("Authorization: Bearer sk-bearer-123", "sk-bearer-123"),
        ("authorization: bearer sk-lower-456", "sk-lower-456"),
        ("{'Authorization': 'Bearer sk-in-headers'}", "sk-in-headers"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("Authorization: raw-token-value", "raw-token-value"),
        ("curl -H 'Bearer sk-curl-789' http://x", "sk-curl-789"),
        ("password='p@ss word'", "p@ss word"),
        (r"api_key='it\'s-escaped'", "s-escaped"),
        (f"downloading with {HF} from the Hub", HF),
        ("--worker-urls http://router:w0rker-pass@10.0.0.1:30000", "w0rker-pass"),
        ("index https://deploy:s3cret@mirror.internal/simple", "s3cret"),
        ("'https://ghp_tokenasuser@git.example/x'", "ghp_tokenasuser"),
    ],
)
def test_credentials_found_by_their_form(line, secret):
    out = redact(line)
    assert secret not in out and M in out


@pytest.mark.parametrize(
    "line",
    [
        'INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200',
        "max_total_tokens=500000, num_tokens=3, token_usage=0.5, tokenizer_mode='auto'",
        "'usage': {'prompt_tokens': 7, 'completion_tokens': 3}",
        "api_key=None admin_api_key=None hf_token=null",
        "api_key=''",
        "--max-tokens 5 --token-limit 9",
        "The server is fired up and ready to roll!",
        "a basic example",
        "http://10.0.0.1:30000/health https://pypi.org/simple",
        "ssh://git@ never; mailto: someone@example.com",
    ],
)
def test_lines_without_credentials_are_unchanged(line):
    assert redact(line) == line


def test_known_values_go_wherever_they_are_even_without_a_key_name():
    secret = 'sk "odd" \\ value'
    text = (
        f"crash: {secret} | repr {secret!r} | json {json.dumps(secret)} | "
        f"token {HF} | plain hf_site_TOKEN_abcdefghij"
    )
    out = redact(text, secrets=[secret, "hf_site_TOKEN_abcdefghij\n", None, ""])
    assert "odd" not in out and "hf_site_TOKEN" not in out and HF not in out
    assert out.startswith("crash: ********")


def test_empty_and_missing_secrets_redact_nothing_extra():
    assert redact("nothing secret here", secrets=[None, "", "   "]) == "nothing secret here"


def test_a_custom_mask_and_idempotence():
    once = redact(SERVER_ARGS_REPR, mask="[redacted]")
    assert "api_key='[redacted]'" in once and API_KEY not in once
    assert redact(redact(SERVER_ARGS_REPR)) == redact(SERVER_ARGS_REPR)


def test_a_journal_tail_of_many_lines():
    journal = "\n".join(
        [
            SERVER_ARGS_REPR,
            "Load weight begin. avail mem=94.50 GB",
            f"HTTP request with header Authorization: Bearer {API_KEY}",
            "RuntimeError: Failed to load model broken/model",
        ]
    )
    out = redact(journal, secrets=[API_KEY])
    assert API_KEY not in out
    assert out.splitlines()[1:4:2] == [
        "Load weight begin. avail mem=94.50 GB",
        "RuntimeError: Failed to load model broken/model",
    ]
    assert len(out.splitlines()) == 4


def test_a_url_login_keeps_the_user_and_host():
    assert redact("http://router:pw@10.0.0.1:30000 and http://x:@h") == (
        f"http://router:{M}@10.0.0.1:30000 and http://x:@h"
    )
