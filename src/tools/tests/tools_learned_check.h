#pragma once
// The zero-false-positive check shared by the tests on ordinary checkpoints: the
// summary is "learned", every layer is learned (of the expected count and types), every
// tensor is learned or all zero, and no evidence is stronger than a note.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/audit.h"

namespace qpu::tools {

inline void expect_learned_everywhere(const AuditReport& r, const std::string& name, int64_t layers,
                                      const std::vector<std::string>& layer_types) {
  EXPECT_EQ(r.summary.verdict, "learned") << name << "\n" << format_audit(r, true);
  ASSERT_EQ(static_cast<int64_t>(r.layers.size()), layers) << name;
  for (size_t i = 0; i < r.layers.size(); ++i) {
    EXPECT_EQ(r.layers[i].verdict, Verdict::Learned) << name << " " << r.layers[i].id;
    if (!layer_types.empty()) {
      EXPECT_EQ(r.layers[i].type, layer_types[i]) << name;
    }
  }
  for (const TensorAudit& t : r.tensors) {
    EXPECT_TRUE(t.verdict == Verdict::Learned || t.verdict == Verdict::Zero) << name << " " << t.name;
    for (const Evidence& e : t.evidence) EXPECT_EQ(e.strength, Strength::Note) << name << " " << e.message;
  }
  EXPECT_TRUE(r.warnings.empty()) << name << ": " << r.warnings.front();
}

}  // namespace qpu::tools
