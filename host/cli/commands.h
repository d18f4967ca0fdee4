// One function per subcommand; each registers itself on the app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace nf::cli {

// An error the user caused; main prints "npuforge: error: <what>" and exits with `code`.
struct UserError : std::runtime_error {
  explicit UserError(const std::string& m, int code = 1) : std::runtime_error(m), code(code) {}
  int code;
};

// Prints every error but the last, then throws the last as a UserError (exit code 2).
void fail_with_errors(const std::vector<std::string>& errors);

void add_plugins(CLI::App& app);
void add_check(CLI::App& app);
void add_inspect(CLI::App& app);
void add_build(CLI::App& app);
void add_run(CLI::App& app);
void add_eval(CLI::App& app);
void add_export_qdq(CLI::App& app);
void add_estimate(CLI::App& app);

}  // namespace nf::cli
