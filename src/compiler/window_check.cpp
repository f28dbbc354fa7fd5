#include "compiler/window_check.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "common/float_bits.h"

namespace qpu::compiler {

WindowCheck::WindowCheck(const Program& program, const Schedule& schedule, const Allocation& allocation,
                         const std::vector<ValueId>& inputs, int norm_exponent)
    : program_(program),
      allocation_(allocation),
      low_(std::ldexp(1.0f, norm_exponent - 126)),
      high_(std::ldexp(1.0f, norm_exponent - 12)),
      reads_(static_cast<size_t>(schedule.num_sublayers)),
      starts_(static_cast<size_t>(schedule.num_sublayers)) {
  const auto& ops = program.ops();
  const size_t n = static_cast<size_t>(program.num_values());
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> first(n, kNone);
  start_op_.assign(n, 0);
  const auto access = [&](ValueId v, size_t op, int64_t s) {
    if (v == kOne || v == kNever) return;
    if (s < first[static_cast<size_t>(v)]) first[static_cast<size_t>(v)] = s, start_op_[static_cast<size_t>(v)] = op;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const int64_t s = schedule.sublayer[i];
    for (ValueId v : ops[i].reads()) {
      if (v == kNever) continue;
      reads_[static_cast<size_t>(s)].push_back({v, i});
      access(v, i, s);
    }
    for (ValueId v : ops[i].writes()) access(v, i, s);
  }
  std::vector<char> input(n, 0);
  for (ValueId v : inputs) input[static_cast<size_t>(v)] = 1;
  for (size_t v = 0; v < n; ++v)
    if (!input[v] && first[v] != kNone) starts_[static_cast<size_t>(first[v])].push_back(static_cast<ValueId>(v));
}

void WindowCheck::report(int64_t s, const char* kind, size_t op, ValueId v, float x) {
  ++violations_;
  if (first_.size() >= kept) return;
  char line[512];
  std::snprintf(line, sizeof line, "sublayer %lld: %s: op '%s' value '%s' dim %lld holds %s", static_cast<long long>(s),
                kind, program_.ops()[op].label.c_str(), program_.name(v).c_str(),
                static_cast<long long>(allocation_.dim(v)), describe_float(x).c_str());
  first_.emplace_back(line);
}

void WindowCheck::before_sublayer(int64_t s, std::span<const float> residual) {
  if (s < 0 || s >= static_cast<int64_t>(reads_.size())) return;
  // The dims below index the span unchecked: a stream of another shape is a caller's bug.
  if (static_cast<int64_t>(residual.size()) != allocation_.hidden_size)
    fail("WindowCheck: a residual stream of {} floats, the allocation's hidden size is {}", residual.size(),
         allocation_.hidden_size);
  for (const Read& r : reads_[static_cast<size_t>(s)]) {
    const float x = residual[static_cast<size_t>(allocation_.dim(r.value))];
    const float a = std::fabs(x);
    if (x != 0.0f && !(a >= low_ && a <= high_)) report(s, "read outside the window", r.op, r.value, x);
  }
  for (ValueId v : starts_[static_cast<size_t>(s)]) {
    const float x = residual[static_cast<size_t>(allocation_.dim(v))];
    if (float_bits(x) != 0) report(s, "starts on a dim that is not +0", start_op_[static_cast<size_t>(v)], v, x);
  }
}

}  // namespace qpu::compiler
