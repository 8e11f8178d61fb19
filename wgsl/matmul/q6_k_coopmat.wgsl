#include "matmul/coopmat.wgsl"
#include "matmul/q6_k.wgsl"
