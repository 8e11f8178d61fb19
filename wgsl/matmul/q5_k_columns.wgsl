#include "matmul/columns.wgsl"
#include "matmul/q5_k.wgsl"
