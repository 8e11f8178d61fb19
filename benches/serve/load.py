"""N streaming clients at once against an OpenAI-compatible server (`examples/serve`,
llama-server, ...): each client's time to first token, and the aggregate decode rate.

    python3 benches/serve/load.py --url http://127.0.0.1:8080 --model NAME \\
        --clients 32 --prompt-tokens 128 --max-tokens 128 [--json out.json]

Python's standard library only (the GPU machines have no PyPI), and HTTP/1.1 with one
connection per client, as OpenAI's clients stream. Each prompt is token ids (distinct
per client), sent to `/v1/completions` greedy with `ignore_eos`, so every client
generates exactly `--max-tokens` tokens whatever the weights (synthetic files' random
weights included), as llama-batched-bench does.

Reported, as llama-batched-bench and `compare --parallel` report them:
- time to first token per client (request sent to its first token's chunk), median and
  worst;
- aggregate decode: chunks received by all clients while every client was decoding
  (from the last first token to the first finish), over that window;
- end to end: all completion tokens over the whole run's wall time.
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def one_client(url, body, result):
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)
    sent = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"content-type": "application/json"})
    response = conn.getresponse()
    if response.status != 200:
        result["error"] = f"{response.status}: {response.read()[:300]!r}"
        return
    stamps, usage = [], None
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            result["error"] = chunk["error"]
            return
        if chunk.get("usage"):
            usage = chunk["usage"]
        # The server streams a chunk per generated token (its text may be empty: part
        # of a character, or a synthetic vocabulary's control token).
        if any(c.get("finish_reason") is None for c in chunk.get("choices", [])):
            stamps.append(time.monotonic())
    conn.close()
    result.update(sent=sent, stamps=stamps, usage=usage)


def run(args):
    results = [dict() for _ in range(args.clients)]
    threads = []
    for c in range(args.clients):
        # Distinct prompts: ids from a stride walk over a small, common range.
        ids = [100 + (c * 7919 + i * 104729) % 20000 for i in range(args.prompt_tokens)]
        body = {"model": args.model, "prompt": ids, "max_tokens": args.max_tokens,
                "temperature": 0, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        threads.append(threading.Thread(target=one_client, args=(args.url, body, results[c])))
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise SystemExit(f"{len(errors)} clients failed: {errors[:3]}")
    ttft = [r["stamps"][0] - r["sent"] for r in results]
    tokens = [r["usage"]["completion_tokens"] for r in results]
    all_decoding = max(r["stamps"][0] for r in results)
    first_done = min(r["stamps"][-1] for r in results)
    window = first_done - all_decoding
    in_window = sum(1 for r in results for s in r["stamps"] if all_decoding < s <= first_done)
    report = {
        "clients": args.clients,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "completion_tokens": sum(tokens),
        "wall_s": wall,
        "end_to_end_tok_s": sum(tokens) / wall,
        "aggregate_decode_tok_s": in_window / window if window > 0 else None,
        "decode_window_s": window,
        "per_client_decode_tok_s": [
            (len(r["stamps"]) - 1) / (r["stamps"][-1] - r["stamps"][0])
            if len(r["stamps"]) > 1 else None
            for r in results
        ],
        "ttft_s": ttft,
        "ttft_median_s": statistics.median(ttft),
        "ttft_max_s": max(ttft),
    }
    per_client = [x for x in report["per_client_decode_tok_s"] if x]
    print(f"{args.clients} clients, {args.prompt_tokens}-token prompts, {args.max_tokens} tokens each:")
    print(f"  aggregate decode {report['aggregate_decode_tok_s'] or 0:.1f} tok/s "
          f"(window {window:.2f} s); end to end {report['end_to_end_tok_s']:.1f} tok/s "
          f"over {wall:.2f} s")
    print(f"  per client decode median {statistics.median(per_client):.1f} tok/s")
    print(f"  time to first token: median {report['ttft_median_s'] * 1e3:.0f} ms, "
          f"worst {report['ttft_max_s'] * 1e3:.0f} ms; each (ms): "
          + " ".join(f"{t * 1e3:.0f}" for t in ttft))
    if any(t != args.max_tokens for t in tokens):
        raise SystemExit(f"clients got {sorted(set(tokens))} tokens, not {args.max_tokens}")
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--model", required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--json")
    args = parser.parse_args()
    report = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
