#include "matmul/columns.wgsl"
#include "matmul/q6_k.wgsl"

// At its own round, as its prompt matmuls (q6_k_coopmat.wgsl) fetch.
const FETCH_AHEAD: bool = false;
