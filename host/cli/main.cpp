// npuforge command line: one subcommand per user task. Every failure the user can cause
// ends in one "npuforge: error: ..." line and a non-zero exit.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "cli/commands.h"
#include "pipeline/util.h"

int main(int argc, char** argv) {
  CLI::App app{"npuforge: build and run decoder LLM packages for edge NPUs"};
  app.set_version_flag("--version", "npuforge 0.1.0");
  app.require_subcommand(1);
  app.fallthrough();  // -v / -q work before or after the subcommand
  int verbosity = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbosity, "More log output (-vv for debug traces)");
  app.add_flag("-q,--quiet", quiet, "Only errors");
  app.parse_complete_callback([&] {
    auto logger = spdlog::stderr_color_mt("npuforge");
    logger->set_pattern("%^%l%$: %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(quiet ? spdlog::level::err
                            : verbosity >= 2 ? spdlog::level::trace
                            : verbosity == 1 ? spdlog::level::debug
                                             : spdlog::level::info);
    nf::host::Progress::set_enabled(!quiet);
  });
  nf::cli::add_plugins(app);
  nf::cli::add_check(app);
  nf::cli::add_inspect(app);
  nf::cli::add_build(app);
  nf::cli::add_run(app);
  nf::cli::add_eval(app);
  nf::cli::add_export_qdq(app);
  nf::cli::add_estimate(app);
  nf::host::install_cancel_handler();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nf::cli::UserError& e) {
    std::fprintf(stderr, "npuforge: error: %s\n", e.what());
    return e.code;
  } catch (const nf::host::Cancelled&) {
    std::fprintf(stderr, "npuforge: cancelled\n");
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npuforge: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
