// `npuforge plugins [--json] [NAME]`: what is installed and every option of each plugin.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "manifest/schema.h"
#include "registry/registry.h"

namespace nf::cli {

void add_plugins(CLI::App& app) {
  auto* cmd = app.add_subcommand("plugins", "List installed plugins and their options");
  static bool json = false;
  static std::string name;
  cmd->add_flag("--json", json, "Machine-readable output");
  cmd->add_option("name", name, "Show only this plugin");
  cmd->callback([] {
    host::Registry reg;
    reg.load_directories(host::Registry::search_path());
    nlohmann::json out = nlohmann::json::array();
    bool found = false;
    for (const auto& p : reg.plugins()) {
      if (!name.empty() && p->name != name) continue;
      found = true;
      nlohmann::json options = nlohmann::json::array();
      for (const auto& o : manifest::describe_options(p->schema))  // a default as its JSON value, null when none
        options.push_back({{"name", o.name}, {"type", o.type},
                           {"default", o.default_value.empty() ? nlohmann::json() : nlohmann::json::parse(o.default_value)},
                           {"range", o.range}, {"description", o.description}, {"required", o.required}});
      out.push_back({{"kind", host::kind_name(p->kind)}, {"name", p->name}, {"version", p->version},
                     {"summary", p->summary}, {"library", p->library}, {"options", options}});
    }
    if (!name.empty() && !found) {
      // One line per refusal: "plugin 'x' was refused: <library>: <why>".
      std::vector<std::string> refused;
      for (const host::Refusal* r : reg.refusals_of(name))
        refused.push_back("plugin '" + name + "' was refused: " + r->message);
      for (size_t i = 0; i + 1 < refused.size(); ++i) std::fprintf(stderr, "npuforge: error: %s\n", refused[i].c_str());
      if (!refused.empty()) throw UserError(refused.back(), exit_code::failed);
      std::string hint = reg.refusals().empty() ? "" : " (" + std::to_string(reg.refusals().size()) +
                                                           " refused: `npuforge plugins` lists why)";
      throw UserError("no plugin named '" + name + "' is installed" + hint);
    }
    if (json) {
      std::cout << nlohmann::json{{"plugins", out}, {"warnings", reg.warnings()}}.dump(2) << "\n";
      return;
    }
    if (!quiet())
      for (const auto& w : reg.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
    for (const auto& p : out) {
      std::printf("%-12s %-10s %-8s %s\n", p["kind"].get<std::string>().c_str(), p["name"].get<std::string>().c_str(),
                  p["version"].get<std::string>().c_str(), p["summary"].get<std::string>().c_str());
      for (const auto& o : p["options"]) {
        std::string line = "    " + o["name"].get<std::string>() + " (" + o["type"].get<std::string>() + ")";
        if (!o["default"].is_null()) line += " = " + o["default"].dump();
        if (!o["range"].get<std::string>().empty()) line += "  [" + o["range"].get<std::string>() + "]";
        if (o["required"].get<bool>()) line += "  required";
        if (!o["description"].get<std::string>().empty()) line += "  " + o["description"].get<std::string>();
        std::printf("%s\n", line.c_str());
      }
    }
  });
}

}  // namespace nf::cli
