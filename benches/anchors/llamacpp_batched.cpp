// llama.cpp's decode of many sequences at once, measured as llama-batched-bench measures
// it (S_TG: one token for each of N sequences per llama_decode), for `compare
// --parallel`'s figures side by side. ggml 0.25.3's source in ../shared/anchors holds no
// tools/batched-bench, so this is the same loop written against llama.h. Built on the
// device (results/parallel/lease.sh builds the library and this), against llama.cpp's shared libraries:
//
//   B=/tmp/anchors/build-cuda; LC=/tmp/anchors/lcsrc
//   g++ -O2 -std=c++17 benches/anchors/llamacpp_batched.cpp -I$LC/include -I$LC/ggml/include \
//       -L$B/bin -lllama -lggml -lggml-base -Wl,-rpath,$B/bin -o llamacpp_batched
//   llamacpp_batched MODEL.gguf PROMPT GENERATED N [N ...]
//
// For each N: an empty cache, N prompts of PROMPT tokens (distinct ids, each sequence
// its own) in batches of up to 2,048 tokens, then GENERATED steps of one token per
// sequence. Prints one line per N: prompt time, decode time, aggregate and
// per-sequence decode tok/s. Flash attention on, all layers on the GPU.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

static double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT GENERATED N [N ...]\n", argv[0]);
        return 2;
    }
    const int n_prompt = std::atoi(argv[2]);
    const int n_gen = std::atoi(argv[3]);
    std::vector<int> ns;
    int n_max = 1;
    for (int i = 4; i < argc; i++) {
        ns.push_back(std::atoi(argv[i]));
        n_max = std::max(n_max, ns.back());
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 999;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { std::fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int n_batch = 2048;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_max * (n_prompt + n_gen + 1);
    cp.n_batch = n_batch;
    cp.n_ubatch = 512;
    cp.n_seq_max = n_max;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { std::fprintf(stderr, "no context\n"); return 1; }
    llama_batch batch = llama_batch_init(std::max(n_batch, n_max), 0, 1);
    auto add = [&](llama_token t, int pos, int seq, bool logits) {
        int i = batch.n_tokens++;
        batch.token[i] = t;
        batch.pos[i] = pos;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = seq;
        batch.logits[i] = logits;
    };
    auto decode = [&]() {
        if (batch.n_tokens > 0 && llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "llama_decode failed\n");
            std::exit(1);
        }
        batch.n_tokens = 0;
    };
    bool warm = false;
    for (size_t k = 0; k < ns.size(); k++) {
        const int n = ns[k];
        // The first N runs twice, untimed once: kernels load and buffers grow.
        for (int round = warm ? 1 : 0; round < 2; round++) {
            llama_memory_clear(llama_get_memory(ctx), true);
            llama_synchronize(ctx);
            double t0 = now();
            for (int s = 0; s < n; s++) {
                for (int p = 0; p < n_prompt; p++) {
                    add((llama_token) ((s * 104729LL + p * 7919LL + 1) % n_vocab), p, s, p == n_prompt - 1);
                    if (batch.n_tokens == n_batch) decode();
                }
            }
            decode();
            llama_synchronize(ctx);
            double t1 = now();
            for (int g = 0; g < n_gen; g++) {
                for (int s = 0; s < n; s++) {
                    add((llama_token) ((s * 31 + g * 17 + 5) % n_vocab), n_prompt + g, s, true);
                }
                decode();
            }
            llama_synchronize(ctx);
            double t2 = now();
            warm = true;
            if (round == 0) continue;
            const double tg = (double) n * n_gen / (t2 - t1);
            std::printf("llama.cpp N %d: prompts %d x %d in %.3f s (%.1f tok/s), decode %d x %d in %.3f s: "
                        "%.1f tok/s aggregate, %.1f per sequence\n",
                        n, n, n_prompt, t1 - t0, n * n_prompt / (t1 - t0), n, n_gen, t2 - t1, tg, tg / n);
            std::fflush(stdout);
        }
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
