#include "matmul/coopmat.wgsl"
#include "matmul/q6_k.wgsl"

// Q6_K's groups are fetched at their own step: a step ahead, its decode (six loads,
// two scales) ran 0.94-0.97x on the H100.
const FETCH_AHEAD: bool = false;
