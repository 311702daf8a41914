// TensorView helpers: names, sizes, construction.
#include "attn/tensor.h"

#include <sstream>

#include "attn/error.h"

namespace attn {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "?";
}

size_t dtype_size_bytes(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64: return 8;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::u8:
    case DType::boolean: return 1;
  }
  return 1;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

std::string device_name(const Device& d) {
  return d.is_cuda() ? "cuda:" + std::to_string(d.index) : std::string("cpu");
}

int64_t TensorView::numel() const {
  if (!defined()) return 0;
  // Last dimension first, the order in which make_view checked the product
  // for overflow: in another order a view with an empty (or negative)
  // dimension can pass int64 on the way ([2^62, 2^31, 0]).
  int64_t n = 1;
  for (int i = rank - 1; i >= 0; --i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides_elems[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

namespace {

std::string shape_text(const int64_t* shape, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

TensorView make_view(void* data, DType dtype, int rank, const int64_t* shape,
                     const int64_t* strides_elems, Device device) {
  if (rank < 1 || rank > kMaxRank)
    fail(ErrorKind::value, "a tensor view has an unsupported rank", std::to_string(rank),
         "1 to " + std::to_string(kMaxRank), "reshape the tensor");
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.rank = rank;
  v.device = device;
  int64_t running = 1;
  for (int i = rank - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides_elems[i] = strides_elems ? strides_elems[i] : running;
    // A shape whose element count passes int64 would wrap every stride and
    // size after it (seqlen 2^32 x seqlen 2^32 bias); say so instead.
    if (__builtin_mul_overflow(running, shape[i], &running))
      fail(ErrorKind::value, "a tensor view has more elements than int64 can count", shape_text(shape, rank),
           "at most 2^63 - 1 elements", "shrink the tensor (batch, sequence length, heads or head dim)");
  }
  return v;
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
  return make_view(data, dtype, static_cast<int>(shape.size()), shape.begin(), nullptr, device);
}

TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape,
                     std::initializer_list<int64_t> strides_elems, Device device) {
  if (shape.size() != strides_elems.size())
    fail(ErrorKind::value, "make_view: shape and strides differ in length",
         std::to_string(shape.size()) + " vs " + std::to_string(strides_elems.size()),
         "one stride per dimension", "pass as many strides as dimensions");
  return make_view(data, dtype, static_cast<int>(shape.size()), shape.begin(), strides_elems.begin(),
                   device);
}

}  // namespace attn
