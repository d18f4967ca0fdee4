// Choices by the sequence's length. ONNX Runtime GenAI's LongRoPE exports (Phi-3.5-mini,
// Phi-4-mini) pick their rotary tables by Greater(total length, original_max_position_embeddings),
// the total length read as the attention_mask's width (Shape, Gather 1). In a static variant
// that width is the context length, not the tokens seen; but every sequence the variant holds
// is 1 to CL tokens long, so where the comparison gives one answer over that whole range it
// is that constant. Where it does not (CL past the switch), the comparison reads the runner's
// per-row lengths instead (decoder_io.hpp kSequenceLengths) and each row gathers from the
// tables its own answer chose; a choice of another form is refused.
#pragma once

#include <npuforge/graph/graph_view.h>
#include <npuforge/graph/unique_names.h>

#include <string>

namespace arcl {

struct LengthSwitches {
  size_t folded = 0;     // comparisons replaced by their one answer
  bool per_row = false;  // the graph now reads kSequenceLengths, [1, AR] int64
};

// Replaces each comparison of the mask's width (source_mask's Shape, Gather 1, any Casts) with
// an integer constant by its value over lengths 1..cl, or, when it changes its answer within
// that range, by a comparison of each row's length. Throws nf::Error (`what`: the variant)
// when such a comparison chooses in a way the rows cannot each follow.
LengthSwitches fold_length_switches(nf::Graph g, nf::graph::UniqueNames& names, const std::string& source_mask,
                                    int64_t cl, const std::string& what);

}  // namespace arcl
