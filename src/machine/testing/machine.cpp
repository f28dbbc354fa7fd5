#include "machine/testing/machine.h"

#include <string>

#include "common/error.h"
#include "compiler/gdn_layout.h"
#include "npu/unit_matvec.h"

namespace qpu::machine {

using compiler::ValueId;

std::vector<float> matvec_c(const std::vector<float>& w, const std::vector<float>& x) {
  const size_t n = x.size();
  if (w.size() != n * n) fail("machine: matrix of {} entries for a vector of {}", w.size(), n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    float val = 0.0f;
    for (size_t j = 0; j < n; ++j) val += w[i * n + j] * x[j];
    out[i] = val;
  }
  return out;
}

Machine build_machine(const MachineOptions& o) {
  const int w = o.width;
  if (w < 1 || w > 64) fail("machine: width {} outside [1, 64]", w);
  const auto ww = static_cast<size_t>(w) * static_cast<size_t>(w);
  if (o.a.size() != ww || o.b.size() != ww)
    fail("machine: matrices A ({}) and B ({}) must have {} x {} entries", o.a.size(), o.b.size(), w, w);
  const compiler::GdnLayout layout = compiler::GdnLayout::for_dims(o.key_dim, o.value_dim);
  if (layout.rows() < 3) fail("machine: {} rows per GDN head, the registers X, Y, Z need 3", layout.rows());

  // Control tokens: HDR, NOP, DONE, WX(i), MV(A, i), MV(B, i).
  std::vector<std::string> names = {"HDR", "NOP", "DONE"};
  for (const char* prefix : {"WX", "MV(A)", "MV(B)"})
    for (int i = 0; i < w; ++i) names.push_back(std::string(prefix) + "." + std::to_string(i));
  AssemblerOptions ao;
  static_cast<HostOptions&>(ao) = o;
  ao.elements = w;
  ao.reuse_dims = o.reuse_dims;
  Assembler as(ao, names, "DONE");
  compiler::Program& p = as.program();

  // Matvec (npu/unit_matvec.h): column j of matrix M is one neuron (gate 128 flag_M,
  // weights in its down column), the products rotate through 10 values per lane and the
  // lanes add them in C's order. The unit gates its own constants with the matrix flags'
  // sum; the uplink after it gets the same enable.
  const std::vector<ValueId> matrix_flags = as.inputs("mv.matrix", 2);
  const npu::MatvecUnit mv = npu::matvec_unit(p, {{"A", w, w, o.a}, {"B", w, w, o.b}}, as.register_out(), matrix_flags);
  as.gate_clears(mv.first_op, p.ops().size(), mv.enable);
  as.send(mv.y, mv.enable, p.ops().size());

  auto at = [](const char* prefix, int i) { return std::string(prefix) + "." + std::to_string(i); };
  as.define_header(at("WX", 0));
  // A write token and a matvec token are followed by the three value tokens of the float
  // they write: their successor waits in the delay line.
  for (int i = 0; i < w; ++i) as.define(at("WX", i), as.write(kX, i, i + 1 < w ? at("WX", i + 1) : at("MV(A)", 0)));
  for (int mat = 0; mat < 2; ++mat)
    for (int i = 0; i < w; ++i) {
      const char* self = mat == 0 ? "MV(A)" : "MV(B)";
      const std::string next = i + 1 < w ? at(self, i + 1) : (mat == 0 ? at("MV(B)", 0) : std::string("DONE"));
      MicroOp op = as.write(mat == 0 ? kY : kZ, i, next);
      op.sets = {{matrix_flags[static_cast<size_t>(mat)], 1.0f}};
      op.lane = i;
      op.read_register = mat == 0 ? kX : kY;
      as.define(at(self, i), std::move(op));
    }
  Machine m;
  static_cast<AssembledMachine&>(m) = as.finish();
  m.width = w;
  return m;
}

std::vector<int64_t> Machine::prompt(const std::vector<float>& x) const {
  if (x.size() != static_cast<size_t>(width)) fail("machine: x has {} elements, the machine {}", x.size(), width);
  std::vector<int64_t> t = {hdr()};
  for (int i = 0; i < width; ++i) {
    t.push_back(write_x(i));
    for (int64_t v : value_tokens(x[static_cast<size_t>(i)])) t.push_back(v);
  }
  t.push_back(mv_a(0));
  return t;
}

std::vector<int64_t> Machine::expected_stream(const std::vector<float>& x, const std::vector<float>& a,
                                              const std::vector<float>& b) const {
  // Registers hold what the tokens carry: 0.0f + v (the zero token has no sign).
  std::vector<float> xr(x.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = 0.0f + x[i];
  const std::vector<float> y = matvec_c(a, xr);
  const std::vector<float> z = matvec_c(b, y);
  std::vector<int64_t> s;
  for (int mat = 0; mat < 2; ++mat)
    for (int i = 0; i < width; ++i) {
      for (int64_t v : value_tokens((mat == 0 ? y : z)[static_cast<size_t>(i)])) s.push_back(v);
      s.push_back(i + 1 < width ? (mat == 0 ? mv_a(i + 1) : mv_b(i + 1)) : (mat == 0 ? mv_b(0) : done()));
    }
  return s;
}

}  // namespace qpu::machine
