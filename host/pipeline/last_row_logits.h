// The last row's logits beside every row's. A prefill needs only the last prompt row's
// logits, but an exported decoder runs the LM head on every row: for a 32-token prompt
// that is 31 rows of hidden x vocab multiply-adds thrown away (a third of a 100M model's
// prefill, the head being its largest matrix). The branch takes the head's input at its
// last row and repeats the head on it, as output "logits.last_row" [batch, 1, vocab]; the
// runner asks for it when it needs no other row, and the engine computes only the outputs
// asked for. The branch shares the head's weights and carries its encodings.
#pragma once

#include <memory>

#include "ir/ir.h"

namespace nf::host {

// A copy of `ms` (weights shared) with the branch, or null when `ms` is not one graph in the
// dynamic decoder layout, already has it, or its head is not one it can repeat on one row
// (ops between the head and logits other than Cast/Identity/element-wise with constants).
std::unique_ptr<ir::ModelSet> with_last_row_logits(const ir::ModelSet& ms);

}  // namespace nf::host
