#include "matmul/coopmat.wgsl"
#include "matmul/q8_0.wgsl"
