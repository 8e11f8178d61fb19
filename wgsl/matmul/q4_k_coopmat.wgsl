#include "matmul/coopmat.wgsl"
#include "matmul/q4_k.wgsl"
