// KV cache in f32: one word per pair of values (exact; twice the bytes of f16).

alias KvWord = vec2<f32>;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return w;
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return v;
}
