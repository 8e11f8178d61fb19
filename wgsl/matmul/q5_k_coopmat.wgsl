#include "matmul/coopmat.wgsl"
#include "matmul/q5_k.wgsl"
