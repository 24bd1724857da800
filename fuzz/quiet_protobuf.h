// Protobuf's log handler off, once per process, for the fuzz targets whose
// inputs make protobuf (or ONNX through it) log on many executions: a check
// that matters aborts the target instead, and the log would drown the
// fuzzer's own output.
#ifndef QUANTD_FUZZ_QUIET_PROTOBUF_H_
#define QUANTD_FUZZ_QUIET_PROTOBUF_H_

#include "google/protobuf/stubs/logging.h"

namespace quantd::fuzz {

inline void SilenceProtobufLogs() {
  static const bool done = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)done;
}

}  // namespace quantd::fuzz

#endif  // QUANTD_FUZZ_QUIET_PROTOBUF_H_
