#pragma once
// run.c's sampler flags as `qpu ref` and `qpu story` read them: -t and -p through atof
// (strtod, one rounding to float), -s through atoi, a seed of 0 (or none) replaced by the
// clock. Differences from run.c, on input run.c would accept silently: a flag value that
// is not a number, a temperature below 0 and a topp outside [0, 1] are errors.
#include <cstdint>
#include <optional>
#include <string>

#include "runner/story_session.h"

namespace qpu::cli {

// run.c: temperature = atof(arg), stored in a float.
float parse_atof_float(const char* flag, const std::string& text);
// run.c: atoi(arg), which glibc computes as (int) strtol(arg).
int parse_atoi(const char* flag, const std::string& text);

struct RunCSampling {
  float temperature = 1.0f;
  float topp = 0.9f;
  uint64_t seed = 0;  // the xorshift state run.c starts from (never 0)
};
// -t, -p and -s (none: the clock) as run.c's main reads them, checked as above.
RunCSampling parse_run_c_sampling(const std::string& temperature, const std::string& topp,
                                  const std::optional<std::string>& seed);

// A story's request from run.c's -n, -i and the parsed -t, -p, -s.
runner::StoryRequest story_request(int steps, const std::string& prompt, const RunCSampling& sampling);

}  // namespace qpu::cli
