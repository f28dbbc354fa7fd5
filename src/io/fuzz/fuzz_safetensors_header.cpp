// libFuzzer target: any byte string is a candidate safetensors file. The parser
// must either accept it (and then every float tensor must upcast without touching
// memory outside the buffer) or throw qpu::Error; anything else -- a crash, a
// sanitizer report, another exception type -- is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = std::as_bytes(std::span(data, size));
  try {
    const auto header = qpu::io::parse_safetensors_header(file, "fuzz");
    std::vector<float> out;
    for (const auto& tensor : header.tensors) {
      if (!qpu::io::is_float_weight_dtype(tensor.dtype)) continue;
      out.resize(tensor.numel());
      qpu::io::upcast_to_f32(tensor.dtype, file.subspan(header.data_offset + tensor.begin, tensor.nbytes()), out);
    }
  } catch (const qpu::Error&) {
  }
  return 0;
}
