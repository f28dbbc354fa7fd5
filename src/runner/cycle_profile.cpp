#include "runner/cycle_profile.h"

#include <algorithm>

#include "common/error.h"
#include "machine/control_vocab.h"

namespace qpu::runner {

std::string micro_op_family(const std::string& name) { return machine::control_family(name); }

CycleProfile::CycleProfile(int64_t first_control, const std::vector<std::string>& control_names)
    : first_control_(first_control) {
  if (control_names.empty()) fail("profile: the vocabulary has no control tokens");
  families_.reserve(control_names.size());
  for (const std::string& n : control_names) families_.push_back(micro_op_family(n));
}

void CycleProfile::add(int64_t token, double seconds, int64_t sublayers_run) {
  const int64_t end = first_control_ + static_cast<int64_t>(families_.size());
  if (token < 0 || token >= end) fail("profile: token {} is outside the vocabulary [0, {})", token, end);
  std::string family;
  if (token >= first_control_) {
    last_family_ = families_[static_cast<size_t>(token - first_control_)];
    family = last_family_;
  } else {
    family = last_family_.empty() ? "(values)" : last_family_ + " parts";
  }
  ProfileRow& row = rows_[family];
  row.family = family;
  ++row.cycles;
  row.seconds += seconds;
  row.sublayers_run += sublayers_run;
}

std::vector<ProfileRow> CycleProfile::rows() const {
  std::vector<ProfileRow> rows;
  for (const auto& [name, row] : rows_) rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.seconds > b.seconds; });
  return rows;
}

}  // namespace qpu::runner
