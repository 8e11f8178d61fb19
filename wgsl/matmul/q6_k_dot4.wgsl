#include "matmul/dot4.wgsl"
#include "matmul/q6_k.wgsl"
