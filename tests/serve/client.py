"""The clients of tests/serve.rs: OpenAI's own Python package (and httpx2, which it is
built on, for requests it would never send) against a running `examples/serve`.

Each check is a subcommand; it exits non-zero with the failed assertion's message.
"""

import argparse
import concurrent.futures
import json
import sys
import threading
import time

import httpx2 as httpx
import openai


def client(args):
    return openai.OpenAI(base_url=args.base_url + "/v1", api_key="none", max_retries=0)


def gathered(stream, text_of):
    """A stream's text (each choice's piece by `text_of`), finish reason, usage, and the
    chunks' count."""
    text, finish, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += text_of(choice)
            finish = choice.finish_reason or finish
    return text, finish, usage, chunks


def stream_chat(c, model, messages, **kw):
    """A streamed chat's text, finish reason, usage, and the chunks' count."""
    stream = c.chat.completions.create(
        model=model,
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        **kw,
    )
    return gathered(stream, lambda choice: choice.delta.content or "")


def stream_completion(c, model, prompt, **kw):
    """A streamed completion's text, finish reason, usage, and the chunks' count."""
    stream = c.completions.create(
        model=model,
        prompt=prompt,
        stream=True,
        stream_options={"include_usage": True},
        **kw,
    )
    return gathered(stream, lambda choice: choice.text)


def cached(usage):
    """The prompt tokens a reply's usage says came from an earlier request's cache."""
    return usage.prompt_tokens_details.cached_tokens


def replies(args):
    """Streamed and whole, chat and plain: decode's greedy text, and exact usage. A
    prompt sent again takes all but its last token's rows from the first one's cache,
    and still gets decode's text."""
    expected = json.load(open(args.expected))
    c = client(args)
    chat, plain = expected["chat"], expected["plain"]
    messages = [{"role": "user", "content": chat["prompt"]}]

    text, finish, usage, chunks = stream_chat(
        c, args.model, messages, max_tokens=chat["n"], temperature=0
    )
    assert text == chat["text"], f"streamed chat {text!r} != decode --chat {chat['text']!r}"
    assert chunks >= 3, f"the chat came in {chunks} chunks: not streamed"
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        chat["prompt_tokens"],
        chat["completion_tokens"],
    ), f"streamed chat usage {usage} != decode's {chat}"
    assert finish == chat["finish"], f"finish {finish} != {chat['finish']}"
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert cached(usage) == 0, f"the server's first request took cached rows: {usage}"

    whole = c.chat.completions.create(
        model=args.model, messages=messages, max_tokens=chat["n"], temperature=0
    )
    assert whole.choices[0].message.content == chat["text"], whole
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == chat["finish"]
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (
        chat["prompt_tokens"],
        chat["completion_tokens"],
    ), whole.usage
    assert cached(whole.usage) == chat["prompt_tokens"] - 1, f"the same chat again: {whole.usage}"
    assert whole.model == args.model and whole.object == "chat.completion"

    streamed, finish, usage, _ = stream_completion(
        c, args.model, plain["prompt"], max_tokens=plain["n"], temperature=0
    )
    assert streamed == plain["text"], f"streamed completion {streamed!r} != decode {plain['text']!r}"
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        plain["prompt_tokens"],
        plain["completion_tokens"],
    ), usage
    assert finish == plain["finish"]
    assert cached(usage) == 0, f"a new prompt took cached rows: {usage}"
    whole = c.completions.create(
        model=args.model, prompt=plain["prompt"], max_tokens=plain["n"], temperature=0
    )
    assert whole.choices[0].text == plain["text"], whole
    assert whole.usage.completion_tokens == plain["completion_tokens"], whole.usage
    assert cached(whole.usage) == plain["prompt_tokens"] - 1, whole.usage

    # A stop string: the text ends just before its first appearance, never inside it.
    reply = chat["text"]
    stop = reply[len(reply) // 2 : len(reply) // 2 + 3]
    cut = reply[: reply.find(stop)]
    text, finish, usage, _ = stream_chat(
        c, args.model, messages, max_tokens=chat["n"], temperature=0, stop=[stop, "\u2603"]
    )
    assert (text, finish) == (cut, "stop"), f"stop {stop!r}: {text!r} ({finish}), not {cut!r}"
    assert usage.completion_tokens <= chat["completion_tokens"], usage
    whole = c.chat.completions.create(
        model=args.model, messages=messages, max_tokens=chat["n"], temperature=0, stop=stop
    )
    assert whole.choices[0].message.content == cut and whole.choices[0].finish_reason == "stop"

    # Sampled: the same seed draws the same text, and temperature and top_p are read.
    # Four tokens a draw tell seeds apart (each of lavapipe's decode steps takes a
    # second or two); the top_p draw is the whole greedy reply.
    def sampled(seed, temperature=1.0, top_p=1.0, max_tokens=4):
        return c.chat.completions.create(
            model=args.model,
            messages=messages,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
        ).choices[0].message.content

    first = sampled(11)
    assert sampled(11) == first, "the same seed drew different text"
    draws = {sampled(seed, temperature=2.0) for seed in range(4)}
    assert len(draws) > 1, f"four seeds at temperature 2 drew one text: {draws}"
    # top_p near 0 keeps only the likeliest token: greedy whatever the temperature.
    assert sampled(5, temperature=2.0, top_p=1e-6, max_tokens=chat["n"]) == chat["text"]

    models = c.models.list()
    assert [m.id for m in models.data] == [args.model], models
    print("replies: ok")


def concurrent_clients(args):
    """Eight clients at once, each prompt of its own length: each gets the reply it gets
    alone (the engine's steps are batch-invariant, so they are equal, not just close),
    its prompt's rows but the last taken from the cache its lone request left.
    Streamed completions, not chats: the chat template's system prompt would add about
    30 tokens to each prompt, and lavapipe takes most of a second a prompt token (the
    chats took CI's machine 629 s for the sixteen replies); `replies` checks chats."""
    c = client(args)
    prompts = [
        "Hi",
        "What is the capital of Japan?",
        "Name three colours.",
        "Write a haiku about the sea, please, in English.",
        "Count from one to five.",
        "What is 2 + 2? Answer with a number and then explain how you found it, briefly.",
        "Tell me a short fact about owls.",
        "Translate 'good morning' into French and Spanish, and say which is which.",
    ]

    def ask(prompt):
        started = time.monotonic()
        text, finish, usage, chunks = stream_completion(
            c, args.model, prompt, max_tokens=args.max_tokens, temperature=0
        )
        took = (usage.prompt_tokens, cached(usage))
        return text, finish, usage.completion_tokens, took, time.monotonic() - started

    alone = [ask(p) for p in prompts]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(ask, prompts))
    wall = time.monotonic() - started
    for p, a, t in zip(prompts, alone, together):
        assert a[:3] == t[:3], f"{p!r}: alone {a[:3]}, with seven others {t[:3]}"
        (n, cached_alone), (_, cached_again) = a[3], t[3]
        assert (cached_alone, cached_again) == (0, n - 1), f"{p!r}: cached rows {a[3]}, {t[3]}"
    print(
        f"concurrent: ok; alone {sum(a[4] for a in alone):.1f} s in all, "
        f"8 at once {wall:.1f} s"
    )


def errors(args):
    """Each bad request gets its status and an OpenAI-style error; nothing is lost."""
    url = args.base_url
    http = httpx.Client(timeout=60)
    chat = url + "/v1/chat/completions"
    good = {"model": args.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}

    def expect(response, status, param=None, code=None):
        assert response.status_code == status, (response.status_code, response.text)
        assert response.headers["content-type"].startswith("application/json"), response.headers
        error = response.json()["error"]
        assert error["message"] and isinstance(error["message"], str), error
        assert error["type"], error
        if param is not None:
            assert error["param"] == param, error
        if code is not None:
            assert error["code"] == code, error
        return error

    headers = {"content-type": "application/json"}
    expect(http.post(chat, content=b'{"model": "x", "messages": [', headers=headers), 400)
    expect(http.post(chat, content=b"not json at all", headers=headers), 400)
    expect(http.post(chat, json={**good, "max_tokens": "many"}), 400, param="max_tokens")
    expect(http.post(chat, json={**good, "temperature": "hot"}), 400, param="temperature")
    expect(http.post(chat, json={**good, "messages": "Hi"}), 400, param="messages")
    expect(http.post(chat, json={**good, "messages": [{"role": "user", "content": 7}]}), 400,
           param="messages[0].content")
    expect(http.post(chat, json={**good, "model": "gpt-9"}), 404, param="model", code="model_not_found")
    expect(http.post(chat, json={**good, "n": 3}), 400, param="n")
    expect(http.post(chat, json={**good, "temperature": 3}), 400, param="temperature")
    expect(http.post(chat, json={**good, "tools": []}), 400)
    long_prompt = "Tell me everything. " * args.context
    expect(http.post(chat, json={**good, "messages": [{"role": "user", "content": long_prompt}]}),
           400, code="context_length_exceeded")
    expect(http.post(chat, json={**good, "max_tokens": args.context}), 400, param="max_tokens",
           code="context_length_exceeded")
    expect(http.post(url + "/v1/completions",
                     json={"model": args.model, "prompt": [1, 2, 10**9], "max_tokens": 1}),
           400, param="prompt")
    oversized = {**good, "messages": [{"role": "user", "content": "x" * (args.max_body + 1)}]}
    expect(http.post(chat, json=oversized), 413)
    expect(http.get(url + "/v1/nothing"), 404)
    expect(http.get(chat), 405)

    # The real client raises its typed errors from these.
    c = client(args)
    try:
        c.chat.completions.create(model="gpt-9", messages=good["messages"])
        raise AssertionError("an unknown model was served")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and e.code == "model_not_found", e
    try:
        c.chat.completions.create(model=args.model, messages=good["messages"], max_tokens=10**6)
        raise AssertionError("max_tokens past the context was served")
    except openai.BadRequestError as e:
        assert e.code == "context_length_exceeded", e

    # Nothing was lost: the server answers, and holds no sequence for the bad requests.
    ok = http.post(chat, json=good)
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] <= 2
    health = http.get(url + "/health").json()
    assert health["running"] == 0 and health["queued"] == 0, health
    print("errors: ok")


def disconnect(args):
    """On a server of one sequence and a queue of one: a client that leaves mid-stream
    frees its sequence at once, and a request past the queue gets 503."""
    url = args.base_url
    http = httpx.Client(timeout=120)
    body = {"model": args.model, "prompt": "Once upon a time", "stream": True,
            "max_tokens": args.long_tokens, "temperature": 0}

    def health():
        return http.get(url + "/health").json()

    # A long stream, left after two chunks.
    with http.stream("POST", url + "/v1/completions", json=body) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        seen = 0
        for line in lines:
            if line.startswith("data: "):
                seen += 1
                if seen == 2:
                    break
    # httpx closed the connection: the sequence goes within a step or two.
    deadline = time.monotonic() + 30
    while health()["running"] != 0:
        assert time.monotonic() < deadline, f"the left sequence still runs: {health()}"
        time.sleep(0.2)
    started = time.monotonic()
    quick = http.post(url + "/v1/completions",
                      json={**body, "stream": False, "max_tokens": 3})
    assert quick.status_code == 200, quick.text
    assert quick.json()["usage"]["completion_tokens"] == 3, quick.json()
    print(f"disconnect: freed; the next request took {time.monotonic() - started:.1f} s")

    # Full: one runs, one waits, the third gets 503.
    holder = http.stream("POST", url + "/v1/completions", json=body)
    response = holder.__enter__()
    # Held in a name: closing the line iterator would close the response.
    lines = response.iter_lines()
    first = next(line for line in lines if line.startswith("data: "))
    assert json.loads(first[6:])["choices"], first
    waiter_result = {}

    def waiter():
        r = httpx.post(url + "/v1/completions", json={**body, "stream": False, "max_tokens": 2},
                       timeout=120)
        waiter_result["response"] = r

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 30
    while health()["queued"] != 1:
        assert time.monotonic() < deadline, f"the second request never queued: {health()}"
        time.sleep(0.05)
    refused = http.post(url + "/v1/completions", json={**body, "stream": False, "max_tokens": 2})
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["type"] == "server_overloaded", refused.text
    assert refused.headers.get("retry-after"), refused.headers
    assert health()["running"] == 1, health()
    holder.__exit__(None, None, None)
    del lines
    thread.join(60)
    assert not thread.is_alive(), "the queued request was not served after the stream left"
    r = waiter_result["response"]
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2, r.text
    print("disconnect: ok")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["replies", "concurrent", "errors", "disconnect"])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--expected")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--max-body", type=int, default=65536)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--long-tokens", type=int, default=200)
    args = parser.parse_args()
    {"replies": replies, "concurrent": concurrent_clients, "errors": errors,
     "disconnect": disconnect}[args.check](args)


if __name__ == "__main__":
    sys.exit(main())
