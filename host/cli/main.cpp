// npuforge command line: one subcommand per user task.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"npuforge: build and run decoder LLM packages for edge NPUs"};
  app.set_version_flag("--version", "npuforge 0.1.0");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
