#include "matmul/unpack.wgsl"
#include "matmul/q5_k.wgsl"
