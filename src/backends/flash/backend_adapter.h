// The Backend object of a flash backend (flash_sm80, flash_sm90) and the
// verdict parts both share: what the kernels' parameters cannot describe, the
// head dims of a kernel table, and the error for a missing table row.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "attn/backend.h"

namespace attn::flash {

// A flash backend's entry points; FlashBackend turns them into a Backend.
struct Entries {
  const char* name;
  std::vector<std::string> (*obstacles)(const Problem&, const DeviceInfo&);
  void (*forward)(const Problem&, const ForwardArgs&, const RunContext&);
  void (*backward)(const Problem&, const BackwardArgs&, const RunContext&);
  int64_t (*forward_workspace)(const Problem&);  // device scratch bytes of each pass
  int64_t (*backward_workspace)(const Problem&);
};

class FlashBackend final : public Backend {
 public:
  explicit constexpr FlashBackend(Entries e) : e_(e) {}
  const char* name() const override { return e_.name; }
  std::vector<std::string> supports(const Problem& p, const DeviceInfo& dev) const override {
    return e_.obstacles(p, dev);
  }
  int64_t forward_workspace_bytes(const Problem& p, const ForwardArgs&) const override {
    return e_.forward_workspace(p);
  }
  int64_t backward_workspace_bytes(const Problem& p, const BackwardArgs&) const override {
    return e_.backward_workspace(p);
  }
  void forward(const Problem& p, const ForwardArgs& args, const RunContext& ctx) const override {
    e_.forward(p, args, ctx);
  }
  void backward(const Problem& p, const BackwardArgs& args, const RunContext& ctx) const override;

 private:
  Entries e_;
};

// What the flash kernels' parameter struct (params.h) cannot describe:
// dtypes other than bf16/fp16, mask tensors, bias tensors, rows not 16-byte
// aligned, lengths beyond int32. `backend` names the caller in the reasons.
std::vector<std::string> kernel_reasons(const Problem& p, const char* backend);

// One row of a kernel table, as its X(d_qk, d_v) macro lists it.
struct HeadDims {
  int qk, v;
};
#define ATTN_FLASH_HEAD_DIMS(dqk, dv) flash::HeadDims{dqk, dv},

// "64, 128, 192/128": a table's rows for a reason.
std::string head_dim_list(std::initializer_list<HeadDims> rows);

// The reason for head dims (d_qk, d_v) whose table row is missing ("has no
// forward kernel; flash_sm90's forward has 64, 128") or whose kernel needs
// more shared memory than the device allows; empty when it fits. `smem` is
// the row's shared memory (0: no row).
std::vector<std::string> head_dim_reasons(const Problem& p, const DeviceInfo& dev, const char* backend, int64_t smem,
                                          std::initializer_list<HeadDims> rows);

// A flash kernel table has no row for p's head dims (d_qk/d_v), which
// supports() should have refused: a bug in attn, reported as one. `what`
// names the kernel ("flash_sm90 has no backward kernel"), `table` the table.
[[noreturn]] void fail_missing_table_row(const Problem& p, const char* what, const char* table);

}  // namespace attn::flash
