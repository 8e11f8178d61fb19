// KV cache in f16: a u32 per pair of values (no SHADER_F16 needed). Rounding to f16
// costs about 2^-11 of each value relative; a value past 65504 becomes infinite, and
// the logits' non-finite check reports it.

alias KvWord = u32;

fn kv_pair(w: KvWord) -> vec2<f32> {
    return unpack2x16float(w);
}

fn kv_word(v: vec2<f32>) -> KvWord {
    return pack2x16float(v);
}
