// Helpers shared by the ONNX tests: temp folders, graph comparison, proto building.
#pragma once

#include "onnx/onnx_io.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace nf::onnx_test {

namespace fs = std::filesystem;

inline fs::path data_dir() { return fs::path(NPUFORGE_SOURCE_DIR) / "tests/onnx/data"; }

// A fresh folder per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           ("npuforge_onnx_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string tensor_bytes(const ir::Tensor& t) {
  if (t.nbytes() == 0) return {};
  return {static_cast<const char*>(t.data()), t.nbytes()};
}

// Deep structural + byte equality; reports the first difference.
inline ::testing::AssertionResult same_graph(const ir::Graph& a, const ir::Graph& b);

inline ::testing::AssertionResult same_tensor(const std::string& what, const ir::Tensor& a, const ir::Tensor& b) {
  if (a.dtype != b.dtype) return ::testing::AssertionFailure() << what << ": dtype differs";
  if (a.dims != b.dims) return ::testing::AssertionFailure() << what << ": dims differ";
  if (a.strings != b.strings) return ::testing::AssertionFailure() << what << ": strings differ";
  if (tensor_bytes(a) != tensor_bytes(b)) return ::testing::AssertionFailure() << what << ": bytes differ";
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult same_graph(const ir::Graph& a, const ir::Graph& b) {
  auto fail = [&](const std::string& m) { return ::testing::AssertionFailure() << "graph '" << a.name << "': " << m; };
  if (a.name != b.name) return fail("name differs: " + b.name);
  if (a.inputs != b.inputs) return fail("inputs differ");
  if (a.outputs != b.outputs) return fail("outputs differ");
  if (a.nodes.size() != b.nodes.size()) return fail("node count differs");
  if (a.initializers.size() != b.initializers.size()) return fail("initializer count differs");
  if (a.types.size() != b.types.size()) return fail("type count differs");
  for (const auto& [name, vt] : a.types) {
    auto it = b.types.find(name);
    if (it == b.types.end()) return fail("missing type of " + name);
    if (vt.dtype != it->second.dtype || vt.shape.has_value() != it->second.shape.has_value())
      return fail("type of " + name + " differs");
    if (vt.shape)
      for (size_t i = 0; i < vt.shape->size(); ++i)
        if ((*vt.shape)[i].value != (*it->second.shape)[i].value || (*vt.shape)[i].param != (*it->second.shape)[i].param)
          return fail("shape of " + name + " differs");
  }
  for (const auto& [name, ref] : a.initializers) {
    const ir::Tensor* t = b.initializer(name);
    if (!t) return fail("missing initializer " + name);
    if (auto r = same_tensor(name, ref->tensor, *t); !r) return r;
  }
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const ir::Node &x = *a.nodes[i], &y = *b.nodes[i];
    if (x.op_type != y.op_type || x.domain != y.domain || x.name != y.name || x.inputs != y.inputs ||
        x.outputs != y.outputs || x.attrs.size() != y.attrs.size())
      return fail("node " + std::to_string(i) + " '" + x.name + "' differs");
    for (const auto& [k, av] : x.attrs) {
      auto it = y.attrs.find(k);
      if (it == y.attrs.end()) return fail("node '" + x.name + "' lacks attribute " + k);
      const ir::Attribute& bv = it->second;
      if (av.type != bv.type || av.i != bv.i || av.f != bv.f || av.s != bv.s || av.ints != bv.ints ||
          av.floats != bv.floats || av.strings != bv.strings || bool(av.t) != bool(bv.t) || bool(av.g) != bool(bv.g))
        return fail("node '" + x.name + "' attribute " + k + " differs");
      if (av.t)
        if (auto r = same_tensor(x.name + "." + k, av.t->tensor, bv.t->tensor); !r) return r;
      if (av.g)
        if (auto r = same_graph(*av.g, *bv.g); !r) return r;
    }
  }
  return ::testing::AssertionSuccess();
}

// Checks that a ModelError message is one line and starts with the expected path.
#define EXPECT_MODEL_ERROR(stmt, path_prefix, needle)                                  \
  do {                                                                                 \
    try {                                                                              \
      stmt;                                                                            \
      ADD_FAILURE() << "no ModelError from " #stmt;                                    \
    } catch (const nf::onnx_io::ModelError& e) {                                       \
      std::string m = e.what();                                                        \
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;                                 \
      EXPECT_EQ(m.rfind(std::string(path_prefix) + ": ", 0), 0u) << m;                 \
      EXPECT_NE(m.find(needle), std::string::npos) << m;                               \
    }                                                                                  \
  } while (0)

}  // namespace nf::onnx_test
