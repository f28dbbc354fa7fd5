#pragma once
// Small formatting helpers shared by the audit's rules and reports.
#include <string>

namespace qpu::tools {

// Powers of two as "2^112" / "-2^-64" (the way compiled constants are recognised),
// other values with 6 significant digits.
std::string format_value(double value);

}  // namespace qpu::tools
