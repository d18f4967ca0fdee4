#include "length_switches.h"

#include <npuforge/decoder_io.hpp>
#include <npuforge/graph/value_types.h>

#include <cstring>
#include <functional>
#include <map>
#include <set>

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

// The tables a comparison's answer chooses, as loading leaves LongRoPE's If
// (host/pipeline/constant_branches.h): Slice(stacked tables, Where(answer, ...), Where(answer,
// ...), axis 0), each read by Gathers of rows along axis 0. Empty when anything else reads
// the answer, its bounds or the chosen tables.
std::vector<nf::Node> chosen_tables(const nf::graph::GraphView& view, const std::string& answer) {
  std::vector<nf::Node> slices;
  std::set<std::string> seen;
  if (view.is_output(answer)) return {};
  for (const nf::Node& bound : view.consumers(answer)) {
    if (bound.op_type() != "Where" || bound.input(0) != answer || view.constant_ints(bound.input(1)).size() != 1 ||
        view.constant_ints(bound.input(2)).size() != 1 || view.is_output(bound.output(0)))
      return {};
    for (const nf::Node& slice : view.consumers(bound.output(0))) {
      if (slice.op_type() != "Slice" || slice.input_count() != 4 || !view.is_initializer(slice.input(0)) ||
          slice.input(0) == bound.output(0) || slice.input(3) == bound.output(0) ||
          view.constant_ints(slice.input(3)) != std::vector<int64_t>{0} || view.is_output(slice.output(0)))
        return {};
      for (const nf::Node& gather : view.consumers(slice.output(0)))
        if (gather.op_type() != "Gather" || gather.input(0) != slice.output(0) || gather.attr_int("axis", 0) != 0)
          return {};
      if (seen.insert(slice.output(0)).second) slices.push_back(slice);
    }
  }
  return slices;
}

// The comparison `cmp` reads each row's length (kSequenceLengths) in place of `width`, and
// every Gather of the tables it chose reads the stacked tables at its rows plus that row's
// begin bound. False, with nothing changed, when the choice has another form.
bool choose_per_row(nf::Graph g, nf::graph::GraphView& view, nf::graph::UniqueNames& names, const nf::Node& cmp,
                    const std::string& width) {
  const std::vector<nf::Node> slices = chosen_tables(view, cmp.output(0));
  if (slices.empty()) return false;
  auto cast = [&](const std::string& value, nf_dtype to) {
    const std::string out = names.make(value + ".cast");
    g.add_node("Cast", {value}, {out}, names.make(value + "/Cast")).set_attr("to", static_cast<int64_t>(to));
    return out;
  };
  auto dtype = [&](const std::string& value) {
    auto t = nf::graph::get_value_type(g, value);
    return t ? t->dtype : NF_DTYPE_INT64;
  };
  std::string lengths = nf::decoder::kSequenceLengths;
  if (dtype(width) != NF_DTYPE_INT64) lengths = cast(lengths, dtype(width));
  nf::Node(cmp).set_input(cmp.input(0) == width ? 0 : 1, lengths);
  for (const nf::Node& slice : slices) {
    const std::string tables = slice.input(0), begin = slice.input(1);
    for (const nf::Node& gather : std::vector<nf::Node>(view.consumers(slice.output(0)))) {
      const std::string rows = gather.input(1);
      const std::string shape = names.make(rows + "/shape"), shaped = names.make(begin + "/per_row");
      g.add_node("Shape", {rows}, {shape}, names.make(shape + "/Shape"));
      g.add_node("Reshape", {begin, shape}, {shaped}, names.make(shaped + "/Reshape"));
      const std::string offset = dtype(rows) == NF_DTYPE_INT64 ? shaped : cast(shaped, dtype(rows));
      const std::string at = names.make(rows + "/in_tables");
      g.add_node("Add", {rows, offset}, {at}, names.make(at + "/Add"));
      nf::Node(gather).set_input(0, tables);
      nf::Node(gather).set_input(1, at);
    }
  }
  g.sort();
  view.refresh();
  return true;
}

}  // namespace

LengthSwitches fold_length_switches(nf::Graph g, nf::graph::UniqueNames& names, const std::string& source_mask,
                                    int64_t cl, const std::string& what) {
  nf::graph::GraphView view(g);
  LengthSwitches result;
  std::vector<std::pair<std::string, bool>> folded;  // comparison output, its value
  struct Switch {
    nf::Node cmp;
    std::string width;
    int64_t at;
  };
  std::vector<Switch> switching;  // comparisons whose answer changes within the variant
  for (const std::string& width : width_values(view, source_mask))
    for (const nf::Node& cmp : view.consumers(width)) {
      auto op = kComparisons.find(std::string(cmp.op_type()));
      if (op == kComparisons.end() || cmp.input_count() != 2) continue;
      const bool swapped = cmp.input(1) == width;
      const std::vector<int64_t> c = view.constant_ints(cmp.input(swapped ? 0 : 1));
      if (c.size() != 1) continue;
      auto at = [&](int64_t t) { return swapped ? op->second(c[0], t) : op->second(t, c[0]); };
      if (at(1) == at(cl)) folded.emplace_back(cmp.output(0), at(cl));
      else switching.push_back({cmp, width, c[0]});
    }
  for (const auto& [value, answer] : folded) {
    const std::string constant = names.make(value + ".static");
    nf::Tensor t = nf::Tensor::create(NF_DTYPE_BOOL, std::vector<int64_t>{});
    std::memset(t.mutable_data(), answer ? 1 : 0, 1);
    g.set_initializer(constant, t);
    view.replace_uses(value, constant);
  }
  for (const Switch& s : switching) {
    if (!choose_per_row(g, view, names, s.cmp, s.width))
      throw nf::Error(what + ": the model changes what it computes when the sequence passes " + std::to_string(s.at) +
                      " tokens ('" + std::string(s.cmp.name()) + "'), in a form a static variant cannot follow row by "
                      "row: build with context_length <= " + std::to_string(s.at));
    result.per_row = true;
  }
  result.folded = folded.size();
  return result;
}

}  // namespace arcl
