// QDQ ONNX export of a quantized model set: the encodings become ONNX ops that any ONNX
// runtime executes, with the numerics of the cpu backend's integer grids.
//   weights (PER_TENSOR, PER_CHANNEL, LPBQ, <= 8 bits): an int8 initializer and a
//     DequantizeLinear (per-axis on the channel axis). 4-bit values sit in int8 (opset < 21
//     has no int4); LPBQ is exact on the int8 per-channel grid as q4 * i_blk at scale s_ch.
//   weights PER_BLOCK, or wider than 8 bits: blockwise DequantizeLinear needs opset 21, so
//     the float weights are written already rounded onto their grid.
//   activations (PER_TENSOR integer encodings on computed values and graph inputs):
//     a QuantizeLinear/DequantizeLinear pair (zero point = -offset) at the producer's output
//     (graph inputs: before their consumers): 8 bits uint8 (ai.onnx); 16 bits uint16 in
//     ONNX Runtime's com.microsoft domain, since ai.onnx has uint16 Q/DQ only from opset 21
//     and the source graphs are usually opset 14-17. Other widths (KV4): the same rounding
//     emulated in float (Mul by 1/scale, Round, Add, Clip, Add, Mul).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "ir/ir.h"

namespace nf::onnx_io {

struct QdqStats {
  size_t weights_dq = 0, weights_on_grid = 0, activations_qdq = 0, activations_emulated = 0;
  nlohmann::json to_json() const {
    return {{"weights_dequantize_linear", weights_dq},
            {"weights_float_on_grid", weights_on_grid},
            {"activations_qdq", activations_qdq},
            {"activations_emulated", activations_emulated}};
  }
};

// The QDQ form of `graph` (a graph of `ms`) under `ms`'s encodings. Throws std::runtime_error
// (one line) for an encoding it cannot express.
std::unique_ptr<ir::Graph> qdq_graph(const ir::ModelSet& ms, const ir::Graph& graph, QdqStats* stats);

}  // namespace nf::onnx_io
