#include "server/chunk_wire.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "quantd/v1/quantization_service.pb.h"

namespace quantd::server {
namespace {

using quantd::v1::CalibrateRequest;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;

// `bytes` as gRPC would hand them over: cut into slices at `cuts`.
std::vector<grpc::Slice> Sliced(const std::string& bytes,
                                std::vector<size_t> cuts = {}) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + at, cut - at);
    at = cut;
  }
  return slices;
}

std::string Payload(const std::vector<grpc::Slice>& slices,
                    const WireField& field) {
  std::string out;
  AppendSliceBytes(slices, field.offset, field.size, &out);
  return out;
}

std::string ChunkRequest(const std::string& chunk) {
  QuantizeRequest request;
  request.set_model_chunk(chunk);
  return request.SerializeAsString();
}

TEST(ChunkWireTest, BothRequestsNumberTheModelChunkAlike) {
  EXPECT_EQ(QuantizeRequest::kModelChunkFieldNumber, kRequestModelChunkField);
  EXPECT_EQ(CalibrateRequest::kModelChunkFieldNumber, kRequestModelChunkField);
}

TEST(ChunkWireTest, FindsTheChunkOfAChunkMessageWhereverGrpcCutsIt) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{127}, size_t{128},
                      size_t{16383}, size_t{16384}, size_t{1} << 20}) {
    std::string chunk(size, '\0');
    for (size_t i = 0; i < size; ++i) chunk[i] = static_cast<char>(i * 7);
    const std::string wire = ChunkRequest(chunk);
    for (size_t cut = 0; cut <= std::min<size_t>(wire.size(), 8); ++cut) {
      const std::vector<grpc::Slice> slices = Sliced(wire, {cut});
      WireField field;
      ASSERT_TRUE(FindSoleBytesField(slices, kRequestModelChunkField, &field))
          << "size " << size << " cut " << cut;
      EXPECT_EQ(field.size, size);
      EXPECT_EQ(Payload(slices, field), chunk);
    }
  }
}

TEST(ChunkWireTest, EverythingElseIsLeftToProtobuf) {
  WireField field;
  auto finds = [&](const std::string& wire) {
    return FindSoleBytesField(Sliced(wire), kRequestModelChunkField, &field);
  };
  const std::string chunk = ChunkRequest("abcdef");
  QuantizeRequest config;
  config.mutable_config()->set_model_size_bytes(6);
  QuantizeRequest batch;
  batch.mutable_calibration_batch();
  EXPECT_FALSE(finds(""));
  EXPECT_FALSE(finds(config.SerializeAsString()));
  EXPECT_FALSE(finds(batch.SerializeAsString()));
  EXPECT_FALSE(finds(chunk + chunk));  // Two fields (the last would win).
  EXPECT_FALSE(finds(chunk + config.SerializeAsString()));
  EXPECT_FALSE(finds(chunk.substr(0, chunk.size() - 1)));  // Truncated.
  EXPECT_FALSE(finds(chunk + "x"));                        // Trailing byte.
  EXPECT_FALSE(finds(std::string("\x10\x06", 2)));  // Field 2 as a varint.
  // A length of 6 bytes (protobuf reads at most 5).
  EXPECT_FALSE(
      finds(std::string("\x12\x86\x80\x80\x80\x80\x00", 7) + "abcdef"));
  // Over INT_MAX.
  EXPECT_FALSE(finds(std::string("\x12\x80\x80\x80\x80\x08", 6)));
  EXPECT_FALSE(
      FindSoleBytesField(Sliced(chunk), /*field=*/3, &field));  // Not 2.
}

// Whatever the fast path accepts, protobuf's parse accepts too and reads
// the same bytes: random messages built from a chunk header and noise.
TEST(ChunkWireTest, AcceptsOnlyWhatProtobufParsesToTheSameChunk) {
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string wire;
    const int length = static_cast<int>(rng() % 40);
    if (rng() % 2 == 0) {
      wire = ChunkRequest(std::string(length, 'q'));
      // Flip, drop or add a byte now and then.
      const int edit = static_cast<int>(rng() % 4);
      if (edit == 1 && !wire.empty()) {
        wire[rng() % wire.size()] ^= static_cast<char>(1 << (rng() % 8));
      } else if (edit == 2 && !wire.empty()) {
        wire.erase(rng() % wire.size(), 1);
      } else if (edit == 3) {
        wire.insert(wire.begin() + static_cast<long>(rng() % (wire.size() + 1)),
                    static_cast<char>(rng()));
      }
    } else {
      for (int j = 0; j < length; ++j) wire.push_back(static_cast<char>(rng()));
    }
    WireField field;
    const std::vector<grpc::Slice> slices = Sliced(wire);
    if (!FindSoleBytesField(slices, kRequestModelChunkField, &field)) continue;
    ++accepted;
    QuantizeRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire)) << i;
    ASSERT_EQ(parsed.payload_case(), QuantizeRequest::kModelChunk) << i;
    EXPECT_EQ(parsed.model_chunk(), Payload(slices, field)) << i;
  }
  EXPECT_GT(accepted, 3000);
}

TEST(ChunkWireTest, BuildsAResponseChunkThatOwnsItsBytes) {
  auto model = std::make_shared<std::string>(300000, '\0');
  for (size_t i = 0; i < model->size(); ++i) {
    (*model)[i] = static_cast<char>(i * 13);
  }
  const std::string expected = model->substr(1000, 200000);
  grpc::ByteBuffer buffer = SoleBytesFieldMessage(
      QuantizeResponse::kModelChunkFieldNumber,
      std::const_pointer_cast<const std::string>(model), 1000, 200000);
  model.reset();  // The buffer's slice keeps the bytes alive.
  grpc::Slice flat;
  ASSERT_TRUE(buffer.DumpToSingleSlice(&flat).ok());
  QuantizeResponse parsed;
  ASSERT_TRUE(
      parsed.ParseFromArray(flat.begin(), static_cast<int>(flat.size())));
  ASSERT_EQ(parsed.event_case(), QuantizeResponse::kModelChunk);
  EXPECT_EQ(parsed.model_chunk(), expected);

  grpc::ByteBuffer empty =
      SoleBytesFieldMessage(QuantizeResponse::kModelChunkFieldNumber,
                            std::make_shared<const std::string>(), 0, 0);
  ASSERT_TRUE(empty.DumpToSingleSlice(&flat).ok());
  ASSERT_TRUE(
      parsed.ParseFromArray(flat.begin(), static_cast<int>(flat.size())));
  EXPECT_EQ(parsed.event_case(), QuantizeResponse::kModelChunk);
  EXPECT_TRUE(parsed.model_chunk().empty());
}

}  // namespace
}  // namespace quantd::server
