// `qpu trace-stats FILE... [--window NAME=[LO,HI]]... [--band N] [--json]`: the value
// ranges of golden traces written by `qpu ref --trace`, per record kind, over all the
// files together (src/reference/trace_stats.h; docs/trace-ranges.md uses it).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "common/error.h"
#include "reference/trace_stats.h"

namespace {

struct TraceStatsOptions {
  std::vector<std::string> files;
  std::vector<std::string> windows;
  int band = 45;
  bool json = false;
};

int run_trace_stats(const TraceStatsOptions& o) {
  if (o.band < 1 || o.band > 277) qpu::fail("flag --band: {} binades is outside [1, 277]", o.band);
  std::vector<qpu::reference::TraceWindow> windows;
  for (const auto& spec : o.windows) windows.push_back(qpu::reference::parse_trace_window(spec));
  if (windows.empty()) windows = qpu::reference::default_trace_windows();
  qpu::reference::TraceStats stats(windows);
  for (const auto& file : o.files) stats.add_file(file);
  const std::string out = o.json ? stats.json(o.band) : stats.text(o.band);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

qpu::cli::Runner setup(CLI::App& app) {
  auto o = std::make_shared<TraceStatsOptions>();
  app.add_option("files", o->files, "trace files written by `qpu ref --trace`")->required();
  app.add_option("--window", o->windows,
                 "magnitude window NAME=[LO,HI] ( ( ) for open ends, LO/HI a number or 2^K ); repeatable; "
                 "default npu=[2^-78,2^36] token=[2^-101,2^37] gdn=[18,2^50)");
  app.add_option("--band", o->band, "binades per GDN cell range for the band columns (default 45)");
  app.add_flag("--json", o->json, "JSON instead of the text table");
  return [o] { return run_trace_stats(*o); };
}

qpu::cli::Registration reg{"trace-stats", "Value ranges (binades, windows) of golden traces from `qpu ref --trace`",
                           setup};

}  // namespace
