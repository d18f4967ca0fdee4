// Helpers for tests that run the npuforge executable as a user would.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace nf::test {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string source_dir() { return NPUFORGE_SOURCE_DIR; }
inline std::string binary() { return std::string(NPUFORGE_BINARY_DIR) + "/bin/npuforge"; }
inline std::string model_dir(const std::string& name) { return source_dir() + "/tests/models/" + name; }
// The test registry's well-formed plugins (tests/registry), for --plugin-dir.
inline std::string test_plugins() { return std::string(NPUFORGE_BINARY_DIR) + "/tests/registry/plugins/good"; }

// A directory under /tmp for this test process ("nf_<tag>_<pid>"), made on first use and
// removed when the process exits.
inline const std::filesystem::path& process_dir(const std::string& tag) {
  struct Dir {
    std::filesystem::path path;
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static std::map<std::string, Dir> dirs;
  auto [it, made] = dirs.try_emplace(tag);
  if (made) {
    it->second.path = std::filesystem::temp_directory_path() / ("nf_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(it->second.path);
    std::filesystem::create_directories(it->second.path);
  }
  return it->second.path;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `npuforge ARGS...`, capturing stdout and stderr separately.
inline CommandResult npuforge(const std::vector<std::string>& args) {
  static int counter = 0;
  auto err_file = std::filesystem::temp_directory_path() /
                  ("nf_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::string cmd = quote(binary());
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " 2>" + quote(err_file.string());
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = slurp(err_file);
  std::filesystem::remove(err_file);
  return r;
}

inline nlohmann::json golden(const std::string& model) {
  return nlohmann::json::parse(slurp(model_dir(model) + "/golden.json"));
}

inline std::string join_ids(const nlohmann::json& ids) {
  std::string s;
  for (const auto& v : ids) s += (s.empty() ? "" : ",") + std::to_string(v.get<int>());
  return s;
}

// Number of lines in `s` that are not empty.
inline int line_count(const std::string& s) {
  int n = 0;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) ++n;
  return n;
}

}  // namespace nf::test
