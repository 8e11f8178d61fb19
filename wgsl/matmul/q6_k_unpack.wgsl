#include "matmul/unpack.wgsl"
#include "matmul/q6_k.wgsl"
