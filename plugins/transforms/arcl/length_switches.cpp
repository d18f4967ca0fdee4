#include "length_switches.h"

#include <cstring>
#include <functional>
#include <map>

namespace arcl {
namespace {

// The comparisons of a length t with a constant c, written t OP c (`swapped`: c OP t).
const std::map<std::string, std::function<bool(int64_t, int64_t)>> kComparisons{
    {"Greater", [](int64_t a, int64_t b) { return a > b; }},
    {"GreaterOrEqual", [](int64_t a, int64_t b) { return a >= b; }},
    {"Less", [](int64_t a, int64_t b) { return a < b; }},
    {"LessOrEqual", [](int64_t a, int64_t b) { return a <= b; }},
};

// `v` and the Casts of it, of them, ...: values of v's shape (and, for a scalar, its value).
std::vector<std::string> with_casts(const nf::graph::GraphView& view, std::vector<std::string> values) {
  for (size_t i = 0; i < values.size(); ++i)  // grows while it is read
    for (const nf::Node& cast : view.consumers(values[i]))
      if (cast.op_type() == "Cast") values.push_back(cast.output(0));
  return values;
}

// The values equal to the mask's width: the Gather of its shape's entry 1 (of the mask or
// a Cast of it, as an int32 export reads it), and Casts of that.
std::vector<std::string> width_values(const nf::graph::GraphView& view, const std::string& source_mask) {
  std::vector<std::string> widths;
  for (const std::string& mask : with_casts(view, {source_mask}))
    for (const nf::Node& shape : view.consumers(mask)) {
      if (shape.op_type() != "Shape" || shape.has_attr("start") || shape.has_attr("end")) continue;
      for (const nf::Node& gather : view.consumers(shape.output(0)))
        if (gather.op_type() == "Gather" && gather.attr_int("axis", 0) == 0 &&
            view.constant_ints(gather.input(1)) == std::vector<int64_t>{1})
          widths.push_back(gather.output(0));
    }
  return with_casts(view, widths);
}

}  // namespace

size_t fold_length_switches(nf::Graph g, nf::graph::UniqueNames& names, const std::string& source_mask, int64_t cl,
                            const std::string& what) {
  nf::graph::GraphView view(g);
  std::vector<std::pair<std::string, bool>> folded;  // comparison output, its value
  for (const std::string& width : width_values(view, source_mask))
    for (const nf::Node& cmp : view.consumers(width)) {
      auto op = kComparisons.find(std::string(cmp.op_type()));
      if (op == kComparisons.end() || cmp.input_count() != 2) continue;
      const bool swapped = cmp.input(1) == width;
      const std::vector<int64_t> c = view.constant_ints(cmp.input(swapped ? 0 : 1));
      if (c.size() != 1) continue;
      auto at = [&](int64_t t) { return swapped ? op->second(c[0], t) : op->second(t, c[0]); };
      if (at(1) != at(cl))
        throw nf::Error(what + ": the model changes what it computes when the sequence passes " + std::to_string(c[0]) +
                        " tokens ('" + std::string(cmp.name()) + "': ONNX Runtime GenAI's LongRoPE tables) and a static "
                        "variant cannot: build with context_length <= " + std::to_string(c[0]));
      folded.emplace_back(cmp.output(0), at(cl));
    }
  for (const auto& [value, answer] : folded) {
    const std::string constant = names.make(value + ".static");
    nf::Tensor t = nf::Tensor::create(NF_DTYPE_BOOL, std::vector<int64_t>{});
    std::memset(t.mutable_data(), answer ? 1 : 0, 1);
    g.set_initializer(constant, t);
    view.replace_uses(value, constant);
  }
  return folded.size();
}

}  // namespace arcl
