// How the columns of one weight row share quantization parameters, for the
// algorithms that work row by row (GPTQ, AWQ's loss): blocks of `size`
// consecutive columns restarting every `segment` columns, the layout the
// weight pass gives blocked weights (a Conv blocked along its input
// channels, its columns ordered tap by tap, has one segment per tap).
#ifndef QUANTD_CORE_NUMERICS_ROW_BLOCKS_H_
#define QUANTD_CORE_NUMERICS_ROW_BLOCKS_H_

#include <algorithm>
#include <cstdint>

#include "core/numerics/quant_params.h"

namespace quantd::numerics {

struct RowBlocks {
  int64_t size = 0;         // 0: one block per row.
  int64_t segment = 1;      // Columns per segment.
  int64_t per_segment = 1;  // Blocks per segment.
  int64_t count = 1;        // Blocks per row.

  // `size` 0: one block of the whole row; else blocks of `size` columns
  // restarting every `segment` columns (0: the whole row is one segment,
  // which must divide `cols`), so that the last block of each segment may be
  // short.
  static RowBlocks For(int64_t size, int64_t segment, int64_t cols) {
    RowBlocks b;
    b.size = size;
    b.segment = size > 0 && segment > 0 ? segment : cols;
    b.per_segment = size > 0 ? BlockCount(b.segment, size) : 1;
    b.count = b.segment > 0 ? cols / b.segment * b.per_segment : 0;
    return b;
  }
  // The block column c belongs to.
  int64_t Of(int64_t c) const {
    return size == 0 ? 0 : c / segment * per_segment + c % segment / size;
  }
  // Whether column c is the first of its block.
  bool Starts(int64_t c) const { return size > 0 && c % segment % size == 0; }
  // The first column of block b.
  int64_t Begin(int64_t b) const {
    return size == 0 ? 0 : b / per_segment * segment + b % per_segment * size;
  }
  // Columns in block b (the last of a segment may be short).
  int64_t Length(int64_t b) const {
    return size == 0 ? segment
                     : std::min(size, segment - b % per_segment * size);
  }
};

}  // namespace quantd::numerics

#endif  // QUANTD_CORE_NUMERICS_ROW_BLOCKS_H_
