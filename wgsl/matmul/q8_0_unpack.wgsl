#include "matmul/unpack.wgsl"
#include "matmul/q8_0.wgsl"
