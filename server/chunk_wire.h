#ifndef QUANTD_SERVER_CHUNK_WIRE_H_
#define QUANTD_SERVER_CHUNK_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace quantd::server {

// Model bytes go through the server twice: in as request chunks, out as
// response chunks. Parsed and built as protobuf messages, each chunk is
// copied into a message and again out of it; these helpers handle the one
// shape every chunk has on the wire, a message holding just one
// length-delimited `bytes` field, straight from and to gRPC's slices.

// The field number both requests give `model_chunk`.
inline constexpr int kRequestModelChunkField = 2;
// And `external_data_chunk`.
inline constexpr int kRequestExternalChunkField = 4;

// Where the payload of a message that is exactly one length-delimited
// field `field` lies in `slices` (a serialized message, as
// grpc::ByteBuffer::Dump gives it). False for anything else (other or more
// fields, a truncated or over-long encoding): such a message must go
// through protobuf's parse. For the messages this accepts, that parse would
// give the same bytes, so taking the fast path changes nothing but speed.
struct WireField {
  size_t offset = 0;  // Of the payload, from the start of the message.
  size_t size = 0;
};
bool FindSoleBytesField(const std::vector<grpc::Slice>& slices, int field,
                        WireField* found);

// The slices holding bytes [offset, offset + size) of `slices`: references
// to the same memory, no copy.
std::vector<grpc::Slice> SubSlices(const std::vector<grpc::Slice>& slices,
                                   size_t offset, size_t size);

// Appends `size` bytes from `offset` in `slices` to `out` (which has room).
void AppendSliceBytes(const std::vector<grpc::Slice>& slices, size_t offset,
                      size_t size, std::string* out);

// The tag and length that start a message holding one `bytes` field
// `field` of `size` bytes; the payload follows.
grpc::Slice SoleBytesFieldHeader(int field, size_t size);

// A serialized message holding one `bytes` field `field` whose value is
// [offset, offset + size) of `*owner`, without copying it: the payload
// slice refers to `owner`'s memory and keeps `owner` alive until gRPC is
// done with it.
grpc::ByteBuffer SoleBytesFieldMessage(
    int field, const std::shared_ptr<const std::string>& owner, size_t offset,
    size_t size);

}  // namespace quantd::server

#endif  // QUANTD_SERVER_CHUNK_WIRE_H_
