// stmatrix (sm_90): a warp stores four 8x8 matrices of 16-bit values to
// shared memory, one 16-byte row per lane address. Lane l gives the address
// of row l % 8 of matrix l / 8; register j of lane l holds matrix j's row
// l / 4, columns 2 (l % 4) and 2 (l % 4) + 1: an mma/wgmma accumulator
// fragment's layout, packed to 16 bits. One instruction replaces four 32-bit
// stores per lane.
#pragma once

#include <cstdint>

namespace attn::sm90 {

__device__ __forceinline__ void stmatrix_x4(uint32_t row_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace attn::sm90
