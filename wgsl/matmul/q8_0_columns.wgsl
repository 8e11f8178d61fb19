#include "matmul/columns.wgsl"
#include "matmul/q8_0.wgsl"
