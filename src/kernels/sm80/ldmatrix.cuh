// ldmatrix: a warp loads four 8x8 matrices of 2-byte elements from shared
// memory straight into mma fragments. Lanes 8i..8i+7 give the row addresses of
// matrix i; register i of every lane receives matrix i, lane l holding row
// l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (.trans: the transpose's).
#pragma once

#include <cstdint>

namespace attn::sm80 {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

}  // namespace attn::sm80
