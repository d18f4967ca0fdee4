// npuforge command line: one subcommand per user task. Every failure the user can cause
// ends in one "npuforge: error: ..." line and an exit code from the one table in
// commands.h (CLI11's own parse errors included).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "cli/commands.h"
#include "common/files.h"
#include "common/util.h"
#include "manifest/manifest.h"
#include "manifest/suggest.h"

namespace nf::cli {

const char* const kExitCodeHelp =
    "Exit codes (every command):\n"
    "  0    ok\n"
    "  1    failed: the work ran and failed (a plugin or backend error, I/O, not enough memory or disk)\n"
    "  2    bad usage or input: the command line, a manifest, model, package or file that cannot be used\n"
    "  130  interrupted (SIGINT or SIGTERM): stopped at the next step, what was done reported, nothing half-written\n";

namespace {

bool g_quiet = false;

// Log lines take the progress bar off the terminal line first, so a message never runs on
// after the bar (the next progress report draws it again).
class BarAwareSink final : public spdlog::sinks::ansicolor_stderr_sink_mt {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    host::Progress::clear_bar();
    spdlog::sinks::ansicolor_stderr_sink_mt::log(msg);
  }
};

bool is_main_flag(const std::string& a) {
  if (a == "--verbose" || a == "--quiet" || a == "--help" || a == "--version") return true;
  // -v, -vv, -q, -h and their combinations (-qv).
  return a.size() >= 2 && a[0] == '-' && a[1] != '-' && a.find_first_not_of("vqh", 1) == std::string::npos;
}

// One line for a CLI11 parse error: what was wrong and, for a misspelled command or
// option, the closest name.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  std::vector<std::string> commands;
  for (const auto* sub : app.get_subcommands({})) commands.push_back(sub->get_name());
  // The first word that is not a flag of npuforge itself is the command.
  std::string command, option;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (is_main_flag(a)) continue;
    (!a.empty() && a[0] == '-' ? option : command) = a;
    break;
  }
  if (!option.empty() && app.get_subcommands().empty()) {
    std::vector<std::string> names;
    for (const CLI::Option* o : app.get_options())
      for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
    const std::string name = option.substr(0, option.find('='));
    return "unknown option " + manifest::quote(name) + " for 'npuforge'" + manifest::did_you_mean(name, names) +
           " (npuforge --help)";
  }
  if (command.empty() && app.get_subcommands().empty())
    return "no command given; one of: " + manifest::join(commands) + " (npuforge --help)";
  if (!command.empty() && std::find(commands.begin(), commands.end(), command) == commands.end())
    return "unknown command " + manifest::quote(command) + manifest::did_you_mean(command, commands) +
           " (commands: " + manifest::join(commands) + ")";

  const CLI::App* sub = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
  const std::string where = sub == &app ? "npuforge" : "npuforge " + sub->get_name();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // An unknown option falls through from the command to npuforge itself (fallthrough).
    std::vector<std::string> extras = sub->remaining();
    if (extras.empty()) extras = app.remaining();
    for (const std::string& extra : extras) {
      if (extra.rfind("--", 0) != 0) return "unexpected argument " + manifest::quote(extra) + " for '" + where + "'";
      std::vector<std::string> names;
      for (const CLI::App* a : {sub, &app})
        for (const CLI::Option* o : a->get_options())
          for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
      const std::string name = extra.substr(0, extra.find('='));
      return "unknown option " + manifest::quote(name) + " for '" + where + "'" + manifest::did_you_mean(name, names);
    }
  }
  std::string what = e.what();
  if (!what.empty()) what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
  return what + " (" + where + " --help)";
}

int error(const std::string& message, int code) {
  std::fprintf(stderr, "npuforge: error: %s\n", message.c_str());
  return code;
}

}  // namespace

bool quiet() { return g_quiet; }

}  // namespace nf::cli

int main(int argc, char** argv) {
  using namespace nf::cli;
  CLI::App app{"npuforge: build and run decoder LLM packages for edge NPUs"};
  app.set_version_flag("--version", "npuforge 0.1.0");
  app.require_subcommand(1);
  app.fallthrough();  // -v / -q work before or after the subcommand
  app.footer(kExitCodeHelp);
  int verbosity = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbosity, "More detail: -v each build stage and its options, -vv also timestamps and package files");
  app.add_flag("-q,--quiet", quiet, "Only results and errors: no info lines, warnings, progress or stats");
  app.parse_complete_callback([&] {
    auto logger = std::make_shared<spdlog::logger>("npuforge", std::make_shared<BarAwareSink>());
    logger->set_pattern(verbosity >= 2 ? "%^%l%$ [%T.%e]: %v" : "%^%l%$: %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(quiet ? spdlog::level::err
                            : verbosity >= 2 ? spdlog::level::trace
                            : verbosity == 1 ? spdlog::level::debug
                                             : spdlog::level::info);
    nf::host::Progress::set_enabled(!quiet);
    g_quiet = quiet;
  });
  add_plugins(app);
  add_check(app);
  add_inspect(app);
  add_build(app);
  add_build_stage(app);
  add_run(app);
  add_eval(app);
  add_export_qdq(app);
  add_estimate(app);
  // build, run, eval and export-qdq install the SIGINT/SIGTERM handler themselves (they
  // stop at their next step); the other commands end at once, as a program does.
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return error(describe_parse_error(app, e, argc, argv), exit_code::bad_input);
  } catch (const UserError& e) {
    return error(e.what(), e.code);
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "npuforge: interrupted%s%s\n", *e.what() ? ": " : "", e.what());
    return exit_code::interrupted;
  } catch (const nf::host::Cancelled&) {
    std::fprintf(stderr, "npuforge: interrupted\n");
    return exit_code::interrupted;
  } catch (const nf::manifest::ManifestError& e) {
    return error(e.what(), exit_code::bad_input);
  } catch (const nf::host::FileError& e) {  // an input file missing, not regular, too large
    return error(e.what(), exit_code::bad_input);
  } catch (const std::exception& e) {
    return error(e.what(), exit_code::failed);
  }
  return exit_code::ok;
}
