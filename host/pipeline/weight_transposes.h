// torch's dynamo exporter without its optimizer (and onnxscript before mid-2025) keeps a
// linear layer's weight as the checkpoint stores it, [out, in], behind a Transpose node. The
// stages and backends take a weight as the initializer a MatMul reads (the quant recipes
// encode it per output channel, the backends pack it), so on load each such Transpose is
// folded into a transposed initializer. A table another node also reads (a tied LM head)
// keeps its Transpose: that is the form tie_lm_head gives and every stage knows.
#pragma once

#include <cstdint>
#include <functional>

#include "ir/ir.h"

namespace nf::host {

struct FoldedTransposes {
  size_t weights = 0;  // Transposes folded
  uint64_t bytes = 0;  // their new initializers' bytes
};

// The transpose of a 2-D tensor, new bytes; the source's pages are let go as they are read.
ir::Tensor transposed_2d(const ir::Tensor& w);

// The 2-D Transposes of an initializer nothing else reads, in g's top level.
size_t foldable_weight_transposes(const ir::Graph& g);

// Folds them: the transposed initializer takes the Transpose's output name, the node and
// the source initializer go. `keep` receives each new weight as it is made (WeightSpill),
// so the folding never holds more than one new tensor in memory.
FoldedTransposes fold_weight_transposes(ir::Graph& g, const std::function<void(ir::TensorRef&)>& keep = {});

}  // namespace nf::host
