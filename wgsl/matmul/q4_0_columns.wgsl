#include "matmul/columns.wgsl"
#include "matmul/q4_0.wgsl"

// A round ahead, as its prompt matmuls (coopmat.wgsl) fetch.
const FETCH_AHEAD: bool = true;
