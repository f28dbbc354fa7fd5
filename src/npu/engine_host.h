#pragma once
// The conformance suite's host: the project's Qwen3.5 engine (src/engine).
#include "npu/suite.h"

namespace qpu::npu {

HostFactory engine_host();

}  // namespace qpu::npu
