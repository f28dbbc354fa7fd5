#include "cli/run_c_flags.h"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include "common/error.h"

namespace qpu::cli {

namespace {

// The whole string must be a number (run.c's atof/atoi would read "abc" as 0).
void require_number(const char* flag, const std::string& text, const char* end) {
  while (*end == ' ' || *end == '\t') end++;
  if (text.empty() || end == text.c_str() || *end != '\0') fail("flag {}: '{}' is not a number", flag, text);
}

}  // namespace

float parse_atof_float(const char* flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  require_number(flag, text, end);
  const auto f = static_cast<float>(value);
  if (!std::isfinite(f)) fail("flag {}: '{}' is not a finite float", flag, text);
  return f;
}

int parse_atoi(const char* flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  require_number(flag, text, end);
  if (errno == ERANGE || value < INT32_MIN || value > INT32_MAX) fail("flag {}: '{}' does not fit in an int", flag, text);
  return static_cast<int>(value);
}

RunCSampling parse_run_c_sampling(const std::string& temperature, const std::string& topp,
                                  const std::optional<std::string>& seed) {
  RunCSampling s;
  s.temperature = parse_atof_float("-t", temperature);
  s.topp = parse_atof_float("-p", topp);
  if (s.temperature < 0.0f) fail("flag -t: temperature {} must not be negative", temperature);
  if (s.topp < 0.0f || s.topp > 1.0f) fail("flag -p: topp {} must be in [0, 1]", topp);
  // run.c: unsigned long long rng_seed = atoi(arg); if (rng_seed <= 0) rng_seed = time(NULL).
  // The int is sign-extended, so a negative seed is a large valid state, and only 0 means
  // "use the clock".
  s.seed = seed ? static_cast<uint64_t>(static_cast<int64_t>(parse_atoi("-s", *seed))) : 0;
  if (s.seed == 0) s.seed = static_cast<unsigned int>(std::time(nullptr));
  return s;
}

runner::StoryRequest story_request(int steps, const std::string& prompt, const RunCSampling& sampling) {
  runner::StoryRequest r;
  r.steps = steps;
  r.prompt = prompt;
  r.temperature = sampling.temperature;
  r.topp = sampling.topp;
  r.seed = sampling.seed;
  return r;
}

}  // namespace qpu::cli
