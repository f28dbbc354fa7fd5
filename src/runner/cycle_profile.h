#pragma once
// Where a story run's host cycles and seconds go, per micro-op family (`qpu story
// --profile`, docs/story-cli.md). A host forward runs the micro-op its input token names:
// a control token's forward is charged to its family (the name with every number
// collapsed to '#': FFN(2).17 -> FFN(#).#), a value token's forward to the family of the
// control token it follows, as "<family> parts" (the 3 cycles that carry a float up).
// The counts are exact (they follow from the stream); the seconds are wall time.
#include <cstdint>
#include <map>
#include <string>
#include <vector>


namespace qpu::runner {

// Every run of digits as one '#' (also what bench/machine_live_dims groups op labels by).
std::string micro_op_family(const std::string& control_name);

struct ProfileRow {
  std::string family;
  int64_t cycles = 0;
  double seconds = 0;
  int64_t sublayers_run = 0;  // MLP and mixer sublayers the engine computed (not skipped)
};

class CycleProfile {
 public:
  // The host vocabulary as StreamVocabulary has it: value tokens below first_control,
  // control token first_control + c named control_names[c]. Throws qpu::Error for a
  // vocabulary without control names.
  CycleProfile(int64_t first_control, const std::vector<std::string>& control_names);

  // One forward whose input was `input_token`. A value token before any control token
  // (impossible on the machine) is charged to "(values)". Throws qpu::Error for an id
  // outside the vocabulary.
  void add(int64_t input_token, double seconds, int64_t sublayers_run);

  // By seconds, largest first (ties: by name).
  std::vector<ProfileRow> rows() const;

 private:
  int64_t first_control_ = 0;
  std::vector<std::string> families_;  // per control index
  std::string last_family_;
  std::map<std::string, ProfileRow> rows_;
};

}  // namespace qpu::runner
