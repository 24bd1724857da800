// Eigen's GEMM for the instruction set the library is compiled for.
#define QUANTD_GEMM_BLOCK GemmBlockGeneric
#include "core/executor/gemm_block.inc"
