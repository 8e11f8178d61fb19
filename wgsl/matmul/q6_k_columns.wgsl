#include "matmul/columns.wgsl"
#include "matmul/q6_k.wgsl"
