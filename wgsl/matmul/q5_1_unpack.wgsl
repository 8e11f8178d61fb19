#include "matmul/unpack.wgsl"
#include "matmul/q5_1.wgsl"
