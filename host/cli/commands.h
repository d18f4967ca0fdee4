// One function per subcommand; each registers itself on the app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "manifest/manifest.h"

namespace nf::cli {

// The exit codes of every command (README "Exit codes", `npuforge --help`).
namespace exit_code {
constexpr int ok = 0;
constexpr int failed = 1;        // the work ran and failed: a plugin error, I/O, not enough memory or disk
constexpr int bad_input = 2;     // bad usage or input: the command line, a manifest, model, package or file
constexpr int interrupted = 130; // SIGINT or SIGTERM: stopped at the next step, what was done reported
}  // namespace exit_code

// The table above as `npuforge --help` prints it.
extern const char* const kExitCodeHelp;

// An error the user caused; main prints "npuforge: error: <what>" and exits with `code`.
struct UserError : std::runtime_error {
  explicit UserError(const std::string& m, int code = exit_code::bad_input) : std::runtime_error(m), code(code) {}
  int code;
};

// The command stopped early on SIGINT/SIGTERM after reporting what it did; main prints
// "npuforge: interrupted<detail>" and exits 130.
struct Interrupted : std::runtime_error {
  explicit Interrupted(const std::string& detail = "") : std::runtime_error(detail) {}
};

// -q: only results (stdout) and errors; no info, warnings, progress or stats lines.
bool quiet();

// Prints every error but the last, then throws the last as a UserError (exit code 2).
void fail_with_errors(const std::vector<std::string>& errors);

// parse_manifest, with a clear error for a package or a folder given instead of a manifest.
manifest::Manifest read_manifest(const std::string& path);
// The model, stages and targets of a manifest, with their options (for --json and -v).
nlohmann::json manifest_summary(const manifest::Manifest& m);

void add_plugins(CLI::App& app);
void add_check(CLI::App& app);
void add_inspect(CLI::App& app);
void add_build(CLI::App& app);
void add_build_stage(CLI::App& app);
void add_run(CLI::App& app);
void add_eval(CLI::App& app);
void add_export_qdq(CLI::App& app);
void add_estimate(CLI::App& app);

}  // namespace nf::cli
