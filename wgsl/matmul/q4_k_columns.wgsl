#include "matmul/columns.wgsl"
#include "matmul/q4_k.wgsl"
