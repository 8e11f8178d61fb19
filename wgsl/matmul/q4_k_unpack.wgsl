#include "matmul/unpack.wgsl"
#include "matmul/q4_k.wgsl"
