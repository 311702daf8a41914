// The context-parallel plan: the divisibility rule, chunk ownership and which
// query/key chunk blocks a causal mask skips (see attn/cp.h).
#include <string>

#include "attn/cp.h"

namespace attn::cp {

void check_lengths(const std::vector<int64_t>& lengths, int cp) {
  if (cp < 1)
    fail(ErrorKind::value, "the context-parallel size must be at least 1", std::to_string(cp), "cp >= 1",
         "pass the number of ranks of the communicator");
  for (size_t s = 0; s < lengths.size(); ++s)
    if (lengths[s] % (2 * cp) != 0)
      fail(ErrorKind::value,
           "sequence " + std::to_string(s) + " cannot be split for context parallelism over " + std::to_string(cp) +
               " ranks",
           "length " + std::to_string(lengths[s]),
           "every sequence length divisible by 2*cp = " + std::to_string(2 * cp) +
               " (each rank holds two of the 2*cp equal chunks, for balanced causal work)",
           "pad the sequence to a multiple of " + std::to_string(2 * cp) +
               ", or allow the fallback that runs such a batch without splitting it");
}

Chunks chunks_of(int rank, int cp) { return {rank, 2 * int64_t{cp} - 1 - rank}; }

Block block_kind(int64_t q_chunk, int64_t kv_chunk, bool causal) {
  if (!causal || kv_chunk < q_chunk) return Block::full;
  return kv_chunk == q_chunk ? Block::diagonal : Block::skip;
}

}  // namespace attn::cp
