#include "matmul/dot4.wgsl"
#include "matmul/q4_k.wgsl"
