// The one table of what quantd can produce: (method, op set, precision) ->
// supported or refused, and why. Validation, GetServerInfo and the docs'
// matrix all read it.
#ifndef QUANTD_CORE_ENGINE_CAPABILITIES_H_
#define QUANTD_CORE_ENGINE_CAPABILITIES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "quantd/v1/quantization_service.pb.h"
#include "tensorflow/quantization/quantization_options.pb.h"

namespace quantd {

// Every (method, op set, precision) combination with whether it is served.
const std::vector<quantd::v1::Capability>& CapabilityTable();

// OK when options name a served combination; otherwise INVALID_ARGUMENT for
// values that are never valid (METHOD_UNSPECIFIED, ...) and UNIMPLEMENTED
// naming the combination. Options with no method are OK (pass-through).
absl::Status CheckSupported(
    const tensorflow::quantization::QuantizationOptions& options);

// Fills the capability part of GetServerInfo (methods, op sets, precisions,
// op types, capability table, opset range).
void FillServerInfo(quantd::v1::ServerInfo* info);

}  // namespace quantd

#endif  // QUANTD_CORE_ENGINE_CAPABILITIES_H_
