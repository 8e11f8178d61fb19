// llama.cpp's logits along a given token sequence, one token per decode step (as
// tests/reference's `_llamacpp` files were made), for issue 22's comparisons on more
// positions than those files share with exact math. Built against llama.cpp's own
// library (ggml 0.25.3, ../shared/anchors; cmake and ninja from PyPI), CPU backend:
//
//   tar xf llama.cpp-ggml-0.25.3-src.tar.xz; LC=$PWD/lcsrc; BUILD=$PWD/build-cpu
//   cmake -S $LC -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
//       -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
//       -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
//   cmake --build $BUILD --target llama
//   g++ -O2 -std=c++17 tests/reference/llamacpp_logits.cpp -I$LC/include -I$LC/ggml/include \
//       -L$BUILD/src -L$BUILD/ggml/src -lllama -lggml -lggml-cpu -lggml-base -fopenmp -lpthread \
//       -o llamacpp_logits
//   llamacpp_logits MODEL.gguf IDS.txt OUT.f32 [flash-attn: 0|1]
//
// IDS.txt: token ids separated by whitespace or commas. OUT.f32: for each position, the
// n_vocab logits after that token, little-endian f32, positions in order. With flash
// attention on (1, what llama.cpp's CPU backend picks by itself), it reproduces
// smollm2_q4_1_llamacpp.json's logits to 5e-7 along that file's sequence.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

int main(int argc, char ** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL.gguf IDS.txt OUT.f32 [flash-attn 0|1]\n", argv[0]);
        return 2;
    }
    std::vector<llama_token> ids;
    {
        FILE * f = std::fopen(argv[2], "r");
        if (!f) { std::perror(argv[2]); return 1; }
        int c, v = 0;
        bool in = false;
        while ((c = std::fgetc(f)) != EOF) {
            if (c >= '0' && c <= '9') { v = 10 * v + (c - '0'); in = true; }
            else if (in) { ids.push_back(v); v = 0; in = false; }
        }
        if (in) ids.push_back(v);
        std::fclose(f);
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { std::fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    if (argc > 4) {
        cp.flash_attn_type = std::atoi(argv[4]) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { std::fprintf(stderr, "no context\n"); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE * out = std::fopen(argv[3], "wb");
    if (!out) { std::perror(argv[3]); return 1; }
    for (size_t p = 0; p < ids.size(); p++) {
        llama_token t = ids[p];
        if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
            std::fprintf(stderr, "decode failed at %zu\n", p);
            return 1;
        }
        const float * l = llama_get_logits_ith(ctx, -1);
        std::fwrite(l, sizeof(float), n_vocab, out);
    }
    std::fclose(out);
    std::fprintf(stderr, "%zu positions, %d logits each\n", ids.size(), n_vocab);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
