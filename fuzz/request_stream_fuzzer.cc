// Fuzz target for the request-stream state machine that Quantize and
// Calibrate share (server/job_reactor.cc, through quantize_call.cc and
// calibrate_call.cc): the input decodes into one call, a sequence of
// messages (configs, model chunks, external_data chunks, batches, empty
// messages) with sizes that may lie, and how the client ends it (half-close or
// cancel). The call runs against the real QuantizationServiceImpl, started once
// per process on a localhost port (QUANTD_FUZZ_INPROC=1: in-process channel),
// with a fake JobRunner whose jobs pop every batch, check each tensor with
// core's TensorFromNamed and finish at once, so no model is parsed or
// quantized.
//
// Checked for every input (a violation aborts):
//  - the call ends with a status within its deadline (DEADLINE_EXCEEDED is
//    a stuck server), never INTERNAL or UNKNOWN, and its message fits in
//    kMaxStatusMessageBytes;
//  - the code is the one the protocol (quantization_service.proto) gives
//    the sequence, computed independently by Expect() below: OK only for a
//    well-formed stream whose job succeeded;
//  - the job, when one ran, got exactly the model bytes, the external data
//    and the batches sent, in order; an OK call's responses end with
//    exactly one summary (after the whole model and external data, echoed
//    by the fake, each announced by its size) or result;
//  - afterwards the service has no call, job, queued job or uploading byte
//    left, and still answers GetServerInfo.
// The client reads responses on a thread of its own while it writes, as a
// client must (see RunCall).
//
// Input format (fuzz/fuzz_reader.h; make_stream_seeds.py writes seeds):
//   u8 header   bit 0: Calibrate (else Quantize); bits 1-2: Quantize method
//               (0 unset, 1 STATIC_RANGE, 2 DYNAMIC_RANGE, 3 STATIC_RANGE
//               with calibrated ranges); bits 3-4: Calibrate observer
//   u8 job      bits 0-2: the fake job's result (kOutcomes); bit 3: refuse
//               a batch that TensorFromNamed refuses
//   then actions, u8 op % 8 each, until the input or kMaxMessages ends:
//     0 config      u8 size mode (DeclaredSize), then u8 external size mode
//                   (DeclaredExternal: 0, 1 none; 2 u8; 3 a DeclaredSize)
//     1, 2 chunk    u8 length mode (ChunkLength); content from the offset
//     3, 4 batch    u8 tensors % 4, each: u8 name, u8 dtype, u8 rank % 5,
//                   u8 per dim, u8 data mode (+ u8 length for mode 1)
//     5 empty       a message with no payload
//     6 external    an external_data_chunk: u8 length mode (ChunkLength,
//                   against the declared external size)
//     7 end         u8: odd cancels, even half-closes; stops decoding
//   No end action: half-close.
//
// Built two ways (fuzz/CMakeLists.txt): as a libFuzzer binary, and linked
// with fuzz/structured_corpus_main.cc as the ctest request_stream_fuzz_corpus.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#ifndef QUANTD_FUZZ_NO_ENGINE
#include "core/engine/calibration_session.h"
#endif
#include "core/engine/engine.h"
#include "fuzz/fuzz_reader.h"
#include "grpcpp/grpcpp.h"
#include "quantd/v1/quantization_service.grpc.pb.h"
#include "server/job_runner.h"
#include "server/metrics.h"
#include "server/quantization_service.h"
#include "server/status.h"

// Present when a sanitizer runtime is linked in (weak: absent with gcc).
extern "C" void __sanitizer_set_report_fd(void* fd) __attribute__((weak));
extern "C" void __sanitizer_report_error_summary(const char* summary)
    __attribute__((weak));

namespace {

namespace tfq = tensorflow::quantization;
using quantd::fuzz::ByteReader;
using quantd::v1::CalibrateRequest;
using quantd::v1::CalibrateResponse;
using quantd::v1::QuantizeRequest;
using quantd::v1::QuantizeResponse;
using quantd::v1::TensorBatch;

// Small limits, so that the refusals they cause are a few bytes of input
// away and a well-formed call stays fast.
constexpr uint64_t kMaxModelBytes = 256 << 10;
constexpr uint64_t kMaxBatches = 6;
constexpr size_t kQueueBatches = 2;
// Room for a few calls whose charge has not been given back yet; a leaked
// charge shows up as RESOURCE_EXHAUSTED on a later, well-formed call (and
// in the uploading-bytes gauge, checked after every input).
constexpr uint64_t kMaxUploadingBytes = 4 * kMaxModelBytes;
constexpr uint64_t kOutputChunkBytes = 4 << 10;
constexpr size_t kMaxMessages = 48;
constexpr size_t kMaxInputBytes = 4096;
// Per call, and for the service to settle afterwards. Everything is in
// process and the fake jobs never wait on anything but the stream, so a
// call that needs this long is stuck.
constexpr auto kCallDeadline = std::chrono::seconds(5);
constexpr absl::Duration kSettle = absl::Seconds(5);

int g_report_fd = 2;  // Where Fail writes (the original stderr).

[[noreturn]] void Fail(const std::string& what, const std::string& input) {
  std::string text = absl::StrCat("request_stream_fuzzer: ", what, "\ninput (",
                                  input.size(), " bytes): ");
  for (unsigned char c : input.substr(0, 4096)) {
    absl::StrAppend(&text, absl::Hex(c, absl::kZeroPad2));
  }
  text += "\n";
  if (write(g_report_fd, text.data(), text.size()) < 0) {
    // Nowhere left to say it; the abort still reports the input.
  }
  // Under libFuzzer's -close_fd_mask=2 stderr is /dev/null, but the
  // sanitizers' reports go to libFuzzer's own copy of it: say what failed
  // there too (one SUMMARY line).
  if (__sanitizer_report_error_summary != nullptr) {
    __sanitizer_report_error_summary(
        absl::StrCat("request_stream_fuzzer: ", what.substr(0, 500)).c_str());
  }
  std::abort();
}

// ---------------------------------------------------------------------------
// The plan: what the input decodes to.

enum class Kind { kConfig, kChunk, kExternal, kBatch, kEmpty };

struct Message {
  Kind kind = Kind::kEmpty;
  uint64_t declared = 0;           // kConfig
  uint64_t declared_external = 0;  // kConfig
  std::string chunk;               // kChunk, kExternal
  TensorBatch batch;               // kBatch
};

// What the fake job ends with when the stream was fine: mostly OK, or an
// error core could give (never INTERNAL/UNKNOWN, so any such code the client
// sees comes from the server or gRPC). The long message checks that the
// server caps what it forwards.
struct Outcome {
  absl::StatusCode code;
  size_t message_bytes;
};
constexpr Outcome kOutcomes[] = {
    {absl::StatusCode::kOk, 0},
    {absl::StatusCode::kOk, 0},
    {absl::StatusCode::kOk, 0},
    {absl::StatusCode::kInvalidArgument, 40},
    {absl::StatusCode::kFailedPrecondition, 40},
    {absl::StatusCode::kResourceExhausted, 40},
    {absl::StatusCode::kUnimplemented, 6000},
    {absl::StatusCode::kOk, 0},
};

constexpr const char* kObservers[] = {"min_max", "", "percentile", "bogus"};

struct Plan {
  bool calibrate = false;
  int method = 0;  // Quantize: see the header comment.
  const char* observer = "min_max";
  Outcome outcome;
  bool strict = false;  // The job refuses what TensorFromNamed refuses.
  std::vector<Message> messages;
  bool cancel = false;  // Else half-close.
  // Some tensor name is not UTF-8: the message cannot be parsed.
  bool invalid_utf8 = false;
};

// Model bytes by their offset in the stream, so a chunk lost, repeated or
// reordered changes what the job receives.
char ModelByte(uint64_t offset) {
  return static_cast<char>((offset * 2654435761u) >> 13);
}
// And external data bytes, different from the model's.
char ExternalByte(uint64_t offset) { return ModelByte(offset + 977); }

uint64_t DeclaredSize(ByteReader* in) {
  switch (in->Pick(8)) {
    case 0:
      return in->U16();
    case 1:
      return 0;
    case 2:
      return kMaxModelBytes;
    case 3:
      return kMaxModelBytes + 1;
    case 4:
      return std::numeric_limits<uint64_t>::max();
    case 5:
      return uint64_t{1} << 63;
    case 6:
      return in->U8();
    default:
      return in->U32();
  }
}

// The external_data stream's declared size: mostly none.
uint64_t DeclaredExternal(ByteReader* in) {
  switch (in->Pick(4)) {
    case 0:
    case 1:
      return 0;
    case 2:
      return in->U8();
    default:
      return DeclaredSize(in);
  }
}

// `declared` and `sent` so far: modes relative to what is still owed make a
// well-formed stream (and off-by-one lies) a byte away.
size_t ChunkLength(ByteReader* in, uint64_t declared, uint64_t sent) {
  const uint64_t owed = declared > sent ? declared - sent : 0;
  const uint64_t capped = std::min<uint64_t>(owed, kMaxModelBytes + 1);
  switch (in->Pick(6)) {
    case 0:
      return in->U16();
    case 1:
      return capped;
    case 2:
      return capped + 1;
    case 3:
      return capped > 0 ? capped - 1 : 0;
    case 4:
      return 0;
    default:
      return in->U8();
  }
}

// Returns false when the tensor's name is not UTF-8.
bool DecodeTensor(ByteReader* in, quantd::v1::NamedTensor* t) {
  static const std::string kLongName(300, 'n');
  const std::string names[] = {"x", "", "y", "x", kLongName, "\xff\xfe"};
  const size_t name = in->Pick(6);
  t->set_name(names[name]);
  constexpr int32_t kTypes[] = {1, 1, 10, 6, 0, 17, -1, 1000};
  const int32_t dtype = kTypes[in->Pick(8)];
  t->set_data_type(dtype);
  constexpr int64_t kDims[] = {2,
                               1,
                               0,
                               3,
                               64,
                               -1,
                               int64_t{1} << 40,
                               std::numeric_limits<int64_t>::max()};
  const size_t rank = in->Pick(5);
  int64_t elements = 1;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t d = kDims[in->Pick(8)];
    t->add_shape(d);
    elements = (elements >= 0 && elements <= 4096 && d >= 0 && d <= 4096)
                   ? elements * d
                   : -1;
  }
  // The data length that fits the shape for 4-byte types (FLOAT, INT32);
  // wrong for the others, which is fine.
  const size_t fitting =
      elements >= 0 && elements <= 4096 ? static_cast<size_t>(elements) * 4 : 0;
  size_t n = 0;
  switch (in->Pick(4)) {
    case 0:
      n = fitting;
      break;
    case 1:
      n = in->U8();
      break;
    case 2:
      n = 0;
      break;
    default:
      n = fitting + 1;
      break;
  }
  std::string data(n, '\0');
  for (size_t i = 0; i < n; ++i) data[i] = ModelByte(i + 7);
  t->set_data(std::move(data));
  return name != 5;
}

Plan Decode(ByteReader* in) {
  Plan plan;
  const uint8_t header = in->U8();
  plan.calibrate = (header & 1) != 0;
  plan.method = (header >> 1) & 3;
  plan.observer = kObservers[(header >> 3) & 3];
  const uint8_t job = in->U8();
  plan.outcome = kOutcomes[job & 7];
  plan.strict = (job & 8) != 0;
  uint64_t declared = 0;
  uint64_t sent = 0;
  uint64_t declared_external = 0;
  uint64_t sent_external = 0;
  while (!in->empty() && plan.messages.size() < kMaxMessages) {
    Message m;
    switch (in->Pick(8)) {
      case 0:
        m.kind = Kind::kConfig;
        m.declared = DeclaredSize(in);
        m.declared_external = DeclaredExternal(in);
        // The first config is the one chunks are measured against.
        if (declared == 0) {
          declared = m.declared;
          declared_external = m.declared_external;
        }
        break;
      case 1:
      case 2: {
        m.kind = Kind::kChunk;
        const size_t n = ChunkLength(in, declared, sent);
        m.chunk.resize(n);
        for (size_t i = 0; i < n; ++i) m.chunk[i] = ModelByte(sent + i);
        sent += n;
        break;
      }
      case 3:
      case 4: {
        m.kind = Kind::kBatch;
        for (size_t n = in->Pick(4); n > 0; --n) {
          if (!DecodeTensor(in, m.batch.add_tensors())) {
            plan.invalid_utf8 = true;
          }
        }
        break;
      }
      case 5:
        m.kind = Kind::kEmpty;
        break;
      case 6: {
        m.kind = Kind::kExternal;
        const size_t n = ChunkLength(in, declared_external, sent_external);
        m.chunk.resize(n);
        for (size_t i = 0; i < n; ++i) {
          m.chunk[i] = ExternalByte(sent_external + i);
        }
        sent_external += n;
        break;
      }
      default:
        plan.cancel = (in->U8() & 1) != 0;
        return plan;
    }
    plan.messages.push_back(std::move(m));
  }
  return plan;
}

// ---------------------------------------------------------------------------
// The oracle: the protocol of quantization_service.proto and the limits
// above, written from the proto's comments rather than from the reactor.

struct Expectation {
  // Set when the server must refuse the stream by itself.
  std::optional<grpc::StatusCode> refusal;
  std::string why;
  // Else the job decides (half-close) or the client cancelled.
  bool job_decides = false;
  // Whether a job must have been submitted at all.
  bool job_submitted = false;
  // What the job must have received (for job_decides; a prefix otherwise).
  std::string model;
  std::string external;
  std::vector<const TensorBatch*> batches;
};

bool IsUtf8Names(const TensorBatch& batch) {
  for (const quantd::v1::NamedTensor& t : batch.tensors()) {
    if (t.name() == "\xff\xfe") return false;
  }
  return true;
}

Expectation Expect(const Plan& plan) {
  Expectation e;
  enum { kConfig, kModel, kExternal, kBatches } state = kConfig;
  uint64_t declared = 0;
  uint64_t declared_external = 0;
  auto refuse = [&](grpc::StatusCode code, std::string why) {
    e.refusal = code;
    e.why = std::move(why);
  };
  // The model and its external data are all there: a batch or the end may
  // come.
  auto complete = [&] {
    return e.model.size() == declared && e.external.size() == declared_external;
  };
  for (size_t i = 0; i < plan.messages.size() && !e.refusal; ++i) {
    const Message& m = plan.messages[i];
    const std::string at = absl::StrCat(" (message ", i, ")");
    if (m.kind == Kind::kBatch && !IsUtf8Names(m.batch)) {
      // Not a valid message of the proto: the server cannot parse it.
      refuse(grpc::StatusCode::INVALID_ARGUMENT, "unparseable message" + at);
      break;
    }
    // A batch ends the upload, from either upload state.
    if (m.kind == Kind::kBatch && (state == kModel || state == kExternal)) {
      if (!complete()) {
        refuse(grpc::StatusCode::INVALID_ARGUMENT,
               "batch before the model and its external data" + at);
      } else {
        state = kBatches;
        e.job_submitted = true;
        e.batches.push_back(&m.batch);
      }
    } else {
      switch (state) {
        case kConfig:
          if (m.kind != Kind::kConfig) {
            refuse(grpc::StatusCode::INVALID_ARGUMENT,
                   "first is not config" + at);
          } else if (m.declared == 0) {
            refuse(grpc::StatusCode::INVALID_ARGUMENT, "no model size" + at);
          } else if (m.declared > kMaxModelBytes ||
                     m.declared_external > kMaxModelBytes - m.declared) {
            refuse(grpc::StatusCode::RESOURCE_EXHAUSTED, "model too big" + at);
          } else {
            declared = m.declared;
            declared_external = m.declared_external;
            state = kModel;
          }
          break;
        case kModel:
        case kExternal:
          if (m.kind == Kind::kChunk && state == kModel) {
            if (m.chunk.size() > declared - e.model.size()) {
              refuse(grpc::StatusCode::INVALID_ARGUMENT, "model too long" + at);
            } else {
              e.model += m.chunk;
            }
          } else if (m.kind == Kind::kExternal) {
            if (e.model.size() != declared) {
              refuse(grpc::StatusCode::INVALID_ARGUMENT,
                     "external data before the model is complete" + at);
            } else if (declared_external == 0) {
              refuse(grpc::StatusCode::INVALID_ARGUMENT,
                     "external data not declared" + at);
            } else if (m.chunk.size() > declared_external - e.external.size()) {
              refuse(grpc::StatusCode::INVALID_ARGUMENT,
                     "external data too long" + at);
            } else {
              state = kExternal;
              e.external += m.chunk;
            }
          } else {
            refuse(grpc::StatusCode::INVALID_ARGUMENT,
                   "not the next part of the upload" + at);
          }
          break;
        case kBatches:
          if (m.kind != Kind::kBatch) {
            refuse(grpc::StatusCode::INVALID_ARGUMENT,
                   "not a batch after a batch" + at);
          } else {
            e.batches.push_back(&m.batch);
          }
          break;
      }
    }
    if (!e.refusal && e.batches.size() > kMaxBatches) {
      refuse(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many batches" + at);
    }
  }
  if (e.refusal || plan.cancel) return e;
  if (state == kConfig) {
    refuse(grpc::StatusCode::INVALID_ARGUMENT, "no config before the end");
  } else if (state != kBatches && !complete()) {
    refuse(grpc::StatusCode::INVALID_ARGUMENT,
           "model or external data short at the end");
  } else {
    e.job_decides = true;
    e.job_submitted = true;
  }
  return e;
}

// ---------------------------------------------------------------------------
// The fake core.

struct JobRecord {
  std::string model;
  std::string external;              // The external_data stream, joined.
  std::vector<std::string> batches;  // Serialized, in the order popped.
  absl::Status status;
};

class FakeJobs final : public quantd::server::JobRunner {
 public:
  // How the next jobs end; set before each call.
  void Prepare(const Outcome& outcome, bool strict) {
    absl::MutexLock lock(&mu_);
    outcome_ = outcome;
    strict_ = strict;
  }

  void SubmitQuantize(quantd::v1::QuantizeConfig config,
                      quantd::ModelUpload model, quantd::QuantizeEvents events,
                      std::shared_ptr<const quantd::CancellationToken> cancel,
                      quantd::Engine::QuantizeDone done,
                      std::shared_ptr<quantd::BatchQueue> batches) override {
    Start(std::move(model), std::move(batches), std::move(cancel),
          std::move(events.on_progress),
          [done = std::move(done)](const JobRecord& record, int64_t n) {
            if (!record.status.ok()) return done(record.status);
            quantd::QuantizeResult result;
            result.model = record.model;
            // Echoed back, so the response's external_data chunks are
            // sent too.
            if (!record.external.empty()) {
              result.external.Append(record.external);
            }
            result.summary.set_input_bytes(record.model.size() +
                                           record.external.size());
            result.summary.set_output_bytes(record.model.size() +
                                            record.external.size());
            result.summary.set_model_unchanged(true);
            result.summary.set_unchanged_reason(
                absl::StrCat("fake: ", n, " batches"));
            done(std::move(result));
          });
  }

  void SubmitCalibrate(quantd::v1::CalibrateConfig config,
                       quantd::ModelUpload model,
                       std::shared_ptr<quantd::BatchQueue> batches,
                       quantd::CalibrateEvents events,
                       std::shared_ptr<const quantd::CancellationToken> cancel,
                       quantd::Engine::CalibrateDone done) override {
    Start(std::move(model), std::move(batches), std::move(cancel),
          std::move(events.on_progress),
          [done = std::move(done), method = config.method()](
              const JobRecord& record, int64_t n) {
            if (!record.status.ok()) return done(record.status);
            quantd::v1::CalibrationResult result;
            result.set_method(method);
            result.set_batch_count(n);
            done(std::move(result));
          });
  }

  int threads() const override { return 1; }

  // Waits until every job submitted so far has returned from its done
  // callback, joins their threads and hands their records over; nullopt
  // when one is still running after `timeout` (it is stuck: left running).
  std::optional<std::vector<JobRecord>> WaitIdle(absl::Duration timeout) {
    std::vector<std::thread> threads;
    std::vector<JobRecord> records;
    {
      absl::MutexLock lock(&mu_);
      if (!mu_.AwaitWithTimeout(
              absl::Condition(
                  +[](int* running) { return *running == 0; }, &running_),
              timeout)) {
        return std::nullopt;
      }
      threads.swap(threads_);
      records.swap(records_);
      live_.clear();
    }
    for (std::thread& t : threads) t.join();
    return records;
  }

 private:
  using Finish = std::function<void(const JobRecord&, int64_t)>;

  void Start(quantd::ModelUpload model,
             std::shared_ptr<quantd::BatchQueue> batches,
             std::shared_ptr<const quantd::CancellationToken> cancel,
             std::function<void(const quantd::v1::Progress&)> on_progress,
             Finish finish) {
    absl::MutexLock lock(&mu_);
    ++running_;
    live_.emplace_back(cancel, batches);
    threads_.emplace_back([this, model = std::move(model), batches, cancel,
                           on_progress = std::move(on_progress),
                           finish = std::move(finish), outcome = outcome_,
                           strict = strict_]() mutable {
      JobRecord record;
      record.model = std::move(model.bytes);
      for (const std::string& piece : model.external.pieces()) {
        record.external += piece;
      }
      absl::Status refused;
      int64_t n = 0;
      while (batches != nullptr) {
        std::optional<TensorBatch> batch = batches->Pop();
        if (!batch.has_value()) break;
        record.batches.push_back(batch->SerializeAsString());
        ++n;
        // Core's check of a batch tensor, on hostile shapes and lengths
        // (not in the libFuzzer build, see fuzz/CMakeLists.txt).
        for (const quantd::v1::NamedTensor& t : batch->tensors()) {
#ifdef QUANTD_FUZZ_NO_ENGINE
          const absl::Status s = absl::OkStatus();
#else
          const absl::Status s = quantd::TensorFromNamed(t).status();
#endif
          if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument) {
            Fail(absl::StrCat("TensorFromNamed: not INVALID_ARGUMENT: ",
                              s.ToString(), " (the input is the tensor)"),
                 t.SerializeAsString());
          }
          if (strict && refused.ok()) refused = s;
        }
        if (on_progress) {
          quantd::v1::Progress progress;
          progress.set_stage(quantd::v1::STAGE_CALIBRATE);
          progress.set_done(n);
          on_progress(progress);
        }
      }
      if (cancel->IsCancelled()) {
        record.status = absl::CancelledError("fake job cancelled");
      } else if (!refused.ok()) {
        record.status = refused;
      } else if (outcome.code != absl::StatusCode::kOk) {
        std::string message = "fake core refuses";
        while (message.size() < outcome.message_bytes) message += "; item";
        record.status = absl::Status(outcome.code, message);
      }
      finish(record, n);
      absl::MutexLock lock(&mu_);
      records_.push_back(std::move(record));
      --running_;
    });
  }

  absl::Mutex mu_;
  Outcome outcome_ ABSL_GUARDED_BY(mu_) = kOutcomes[0];
  bool strict_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<JobRecord> records_ ABSL_GUARDED_BY(mu_);
  // The jobs since the last WaitIdle: their tokens and queues.
  std::vector<std::pair<std::shared_ptr<const quantd::CancellationToken>,
                        std::shared_ptr<quantd::BatchQueue>>>
      live_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------
// The service, started once per process and never shut down (the process
// ends with _Exit, see structured_corpus_main.cc; libFuzzer's exit skips it
// too).

struct Harness {
  FakeJobs jobs;
  std::unique_ptr<quantd::server::Metrics> metrics;
  std::unique_ptr<quantd::server::QuantizationServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<quantd::v1::QuantizationService::Stub> stub;
  // Quantize and Calibrate calls opened so far, less the cancelled ones
  // the server never saw (see settle in LLVMFuzzerTestOneInput).
  double calls_opened = 0;
};

// Every call logs a line to stderr (call_record.cc) and so would gRPC:
// at thousands of calls a second that drowns the fuzzer's own output. Send
// stderr to /dev/null and keep the original for Fail and the sanitizers'
// reports. Not when stderr already is /dev/null: libFuzzer's
// -close_fd_mask=2 (scripts/fuzz.sh) has done the same, and reports to a
// copy of its own.
// QUANTD_FUZZ_VERBOSE=1 keeps the server's log, for a rerun on one input.
void QuietStderr() {
  if (const char* verbose = std::getenv("QUANTD_FUZZ_VERBOSE");
      verbose != nullptr && *verbose == '1') {
    return;
  }
  struct stat err_stat, null_stat;
  const int null_fd = open("/dev/null", O_WRONLY);
  if (null_fd < 0) return;
  if (fstat(2, &err_stat) == 0 && fstat(null_fd, &null_stat) == 0 &&
      S_ISCHR(err_stat.st_mode) && err_stat.st_rdev == null_stat.st_rdev) {
    close(null_fd);
    return;
  }
  g_report_fd = dup(2);
  if (g_report_fd < 0) {
    g_report_fd = 2;
    close(null_fd);
    return;
  }
  dup2(null_fd, 2);
  close(null_fd);
  if (__sanitizer_set_report_fd != nullptr) {
    __sanitizer_set_report_fd(
        reinterpret_cast<void*>(static_cast<intptr_t>(g_report_fd)));
  }
}

Harness* StartHarness() {
  QuietStderr();
  auto* h = new Harness;
  quantd::server::Metrics::Options metrics_options;
  metrics_options.bind_address.clear();
  h->metrics = std::move(*quantd::server::Metrics::Create(metrics_options));
  quantd::server::ServiceOptions options;
  options.max_model_bytes = kMaxModelBytes;
  options.max_uploading_bytes = kMaxUploadingBytes;
  options.model_chunk_bytes = kOutputChunkBytes;
  options.max_calibration_batches = kMaxBatches;
  options.calibration_queue_batches = kQueueBatches;
  // Slack for jobs of finished calls that have not returned yet; the
  // gauges checked after each input catch one that never does.
  options.max_concurrent_jobs = 4;
  options.max_queued_jobs = 4;
  h->service = std::make_unique<quantd::server::QuantizationServiceImpl>(
      &h->jobs, h->metrics.get(), options);
  // A localhost socket, as remote clients use. QUANTD_FUZZ_INPROC=1: the
  // in-process transport instead, ~30% faster per input, but gRPC 1.51's
  // keeps ~15 KB per call (RSS grows ~1 GB per 60,000 inputs, which stops
  // a long libFuzzer run at -rss_limit_mb), and it completes a send only
  // when the peer reads it.
  const char* inproc = std::getenv("QUANTD_FUZZ_INPROC");
  const bool use_tcp = inproc == nullptr || *inproc != '1';
  grpc::ServerBuilder builder;
  int port = 0;
  if (use_tcp) {
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
  }
  builder.RegisterService(h->service.get());
  h->server = builder.BuildAndStart();
  if (h->server == nullptr) Fail("the server did not start", "");
  h->stub = quantd::v1::QuantizationService::NewStub(
      use_tcp ? grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                    grpc::InsecureChannelCredentials())
              : h->server->InProcessChannel(grpc::ChannelArguments()));
  return h;
}

// The sum of value(m) over the series of metric family `name`.
template <typename Value>
double MetricSum(quantd::server::Metrics& metrics, const std::string& name,
                 const Value& value) {
  double sum = 0;
  for (const prometheus::MetricFamily& family : metrics.registry().Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) sum += value(m);
  }
  return sum;
}

// The calls the server has ended (status sent, quantd_requests_total) of
// the two streaming methods.
double StreamCallsEnded(quantd::server::Metrics& metrics) {
  return MetricSum(
      metrics, "quantd_requests_total", [](const prometheus::ClientMetric& m) {
        for (const prometheus::ClientMetric::Label& label : m.label) {
          if (label.name == "method" &&
              (label.value == "Quantize" || label.value == "Calibrate")) {
            return m.counter.value;
          }
        }
        return 0.0;
      });
}

double GaugeValue(quantd::server::Metrics& metrics, const std::string& name) {
  return MetricSum(metrics, name, [](const prometheus::ClientMetric& m) {
    return m.gauge.value;
  });
}

// ---------------------------------------------------------------------------
// The client.

QuantizeRequest ToQuantize(const Plan& plan, const Message& m) {
  QuantizeRequest r;
  switch (m.kind) {
    case Kind::kConfig: {
      quantd::v1::QuantizeConfig* c = r.mutable_config();
      c->set_model_size_bytes(m.declared);
      c->set_external_data_bytes(m.declared_external);
      auto* method = c->mutable_options()->mutable_quantization_method();
      if (plan.method == 1 || plan.method == 3) {
        method->set_experimental_method(tfq::QuantizationMethod::STATIC_RANGE);
      } else if (plan.method == 2) {
        method->set_experimental_method(tfq::QuantizationMethod::DYNAMIC_RANGE);
      } else {
        c->clear_options();
      }
      if (plan.method == 3) {
        quantd::v1::TensorRange* range = c->mutable_calibration()->add_ranges();
        range->set_tensor_name("x");
        range->set_min(-1);
        range->set_max(1);
      }
      break;
    }
    case Kind::kChunk:
      r.set_model_chunk(m.chunk);
      break;
    case Kind::kExternal:
      r.set_external_data_chunk(m.chunk);
      break;
    case Kind::kBatch:
      *r.mutable_calibration_batch() = m.batch;
      break;
    case Kind::kEmpty:
      break;
  }
  return r;
}

CalibrateRequest ToCalibrate(const Plan& plan, const Message& m) {
  CalibrateRequest r;
  switch (m.kind) {
    case Kind::kConfig:
      r.mutable_config()->set_method(plan.observer);
      r.mutable_config()->set_model_size_bytes(m.declared);
      r.mutable_config()->set_external_data_bytes(m.declared_external);
      break;
    case Kind::kChunk:
      r.set_model_chunk(m.chunk);
      break;
    case Kind::kExternal:
      r.set_external_data_chunk(m.chunk);
      break;
    case Kind::kBatch:
      *r.mutable_batch() = m.batch;
      break;
    case Kind::kEmpty:
      break;
  }
  return r;
}

template <typename Response>
struct CallResult {
  grpc::Status status;
  std::vector<Response> responses;
};

// Writes until the server stops the stream and ends it as planned, while
// another thread reads every response, as a client must: a server whose
// response waits to be read stops reading (the in-process transport
// completes a send only when the peer takes it; HTTP/2 once its window is
// full), so a client that writes everything first can deadlock.
template <typename Request, typename Response, typename Open, typename Convert>
CallResult<Response> RunCall(const Plan& plan, Open open, Convert convert) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  auto stream = open(&context);
  CallResult<Response> result;
  std::thread reader([&] {
    Response response;
    while (stream->Read(&response)) result.responses.push_back(response);
  });
  for (const Message& m : plan.messages) {
    if (!stream->Write(convert(plan, m))) break;
  }
  if (plan.cancel) {
    context.TryCancel();
  } else {
    stream->WritesDone();
  }
  reader.join();
  result.status = stream->Finish();
  return result;
}

const char* CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "?";
}

std::string Describe(const grpc::Status& s) {
  return absl::StrCat(CodeName(s.error_code()), " \"",
                      s.error_message().substr(0, 300), "\"");
}

// Progress events (one per batch, from the fake) and the tail of an OK
// call: the output's size (a STAGE_SEND progress, when it has bytes), the
// model echoed in chunks then one summary, or one result.
void CheckOkResponses(const CallResult<QuantizeResponse>& r,
                      const Expectation& e, const std::string& input) {
  std::string model;
  std::string external;
  size_t progress = 0;
  size_t sizes = 0;
  size_t external_sizes = 0;
  for (size_t i = 0; i < r.responses.size(); ++i) {
    const QuantizeResponse& m = r.responses[i];
    if (m.has_progress() && m.progress().stage() == quantd::v1::STAGE_SEND &&
        m.progress().message() == "output external data bytes") {
      ++external_sizes;
      if (!external.empty() || model.size() != e.model.size() ||
          m.progress().total() != static_cast<int64_t>(e.external.size())) {
        Fail(
            "Quantize OK: the external data's size is not announced after "
            "the model and before its chunks",
            input);
      }
    } else if (m.has_progress() &&
               m.progress().stage() == quantd::v1::STAGE_SEND) {
      ++sizes;
      if (!model.empty() ||
          m.progress().total() != static_cast<int64_t>(e.model.size())) {
        Fail(
            "Quantize OK: the output's size is not announced before its "
            "chunks",
            input);
      }
    } else if (m.has_progress()) {
      ++progress;
    }
    if (m.has_model_chunk()) model += m.model_chunk();
    if (m.has_external_data_chunk()) external += m.external_data_chunk();
    if (m.has_summary() != (i + 1 == r.responses.size())) {
      Fail("Quantize OK without exactly one summary, last", input);
    }
  }
  if (progress != e.batches.size()) {
    Fail(absl::StrCat("Quantize OK with ", progress, " progress events for ",
                      e.batches.size(), " batches"),
         input);
  }
  if (model != e.model) Fail("Quantize OK: the echoed model differs", input);
  if (external != e.external) {
    Fail("Quantize OK: the echoed external data differs", input);
  }
  if (external_sizes != (e.external.empty() ? 0u : 1u)) {
    Fail(absl::StrCat("Quantize OK with ", external_sizes,
                      " external data size events"),
         input);
  }
  if (sizes != (e.model.empty() ? 0u : 1u)) {
    Fail(absl::StrCat("Quantize OK with ", sizes, " output size events"),
         input);
  }
}

void CheckOkResponses(const CallResult<CalibrateResponse>& r,
                      const Expectation& e, const std::string& input) {
  size_t progress = 0;
  for (size_t i = 0; i < r.responses.size(); ++i) {
    const CalibrateResponse& m = r.responses[i];
    if (m.has_progress()) ++progress;
    if (m.has_result() != (i + 1 == r.responses.size())) {
      Fail("Calibrate OK without exactly one result, last", input);
    }
  }
  if (progress != e.batches.size() || r.responses.empty() ||
      r.responses.back().result().batch_count() !=
          static_cast<int64_t>(e.batches.size())) {
    Fail("Calibrate OK: progress or batch_count differ from the batches",
         input);
  }
}

template <typename Response>
void Check(const CallResult<Response>& r, const Expectation& e,
           const Plan& plan, const std::vector<JobRecord>& jobs,
           const std::string& input) {
  const grpc::Status& s = r.status;
  const grpc::StatusCode code = s.error_code();
  if (code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::string jobs_said;
    for (const JobRecord& job : jobs) {
      absl::StrAppend(&jobs_said, "; a job got ", job.batches.size(),
                      " batches and said ", job.status.ToString());
    }
    Fail(absl::StrCat("the call did not end within its deadline (stuck): ",
                      r.responses.size(), " responses, ", e.batches.size(),
                      " batches sent", jobs_said),
         input);
  }
  if (code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN) {
    Fail("status " + Describe(s), input);
  }
  if (s.error_message().size() > quantd::server::kMaxStatusMessageBytes) {
    Fail(absl::StrCat("status message of ", s.error_message().size(), " bytes"),
         input);
  }
  if (jobs.size() > 1) Fail("more than one job for one call", input);
  const JobRecord* job = jobs.empty() ? nullptr : &jobs[0];
  // A job only ever sees the stream's model and a prefix of its batches.
  if (job != nullptr) {
    if (job->model != e.model) Fail("the job got other model bytes", input);
    if (job->external != e.external) {
      Fail("the job got other external data", input);
    }
    if (job->batches.size() > e.batches.size()) {
      Fail("the job got more batches than were sent", input);
    }
    for (size_t i = 0; i < job->batches.size(); ++i) {
      if (job->batches[i] != e.batches[i]->SerializeAsString()) {
        Fail(absl::StrCat("the job's batch ", i, " differs"), input);
      }
    }
  }

  if (e.refusal.has_value()) {
    // A cancel after the refusal may still reach the client first.
    if (code != *e.refusal &&
        !(plan.cancel && code == grpc::StatusCode::CANCELLED)) {
      Fail(absl::StrCat("expected ", CodeName(*e.refusal), " (", e.why,
                        "), got ", Describe(s)),
           input);
    }
    if (job != nullptr && !e.job_submitted) {
      Fail("a job ran for a stream refused before it was complete", input);
    }
    return;
  }
  if (plan.cancel) {
    if (code != grpc::StatusCode::CANCELLED) {
      Fail("expected CANCELLED, got " + Describe(s), input);
    }
    return;
  }
  // Well-formed and half-closed: the job decides.
  if (job == nullptr) Fail("no job ran for a well-formed stream", input);
  if (job->batches.size() != e.batches.size()) {
    Fail(absl::StrCat("the job got ", job->batches.size(), " of ",
                      e.batches.size(), " batches"),
         input);
  }
  if (static_cast<int>(code) != static_cast<int>(job->status.code())) {
    Fail(absl::StrCat("the job said ", job->status.ToString().substr(0, 300),
                      ", the client got ", Describe(s)),
         input);
  }
  if (s.ok()) CheckOkResponses(r, e, input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* const h = StartHarness();
  if (size > kMaxInputBytes) return 0;
  const std::string input(reinterpret_cast<const char*>(data), size);
  ByteReader in(data, size);
  const Plan plan = Decode(&in);
  const Expectation expected = Expect(plan);

  h->jobs.Prepare(plan.outcome, plan.strict);
  // The call's reactions may still run after the client has its status
  // (e.g. a read that completed as the client cancelled may submit the
  // job); none runs after OnDone. So: the call's OnDone (WaitForCalls),
  // then its job.
  ++h->calls_opened;
  auto settle = [&] {
    // A cancelled call's status is the client's own, so the server may not
    // have started that call yet; its reactions (a job, even) would land in
    // the next input's window. Wait until the server has ended it.
    const absl::Time give_up = absl::Now() + kSettle;
    double ended;
    while ((ended = StreamCallsEnded(*h->metrics)) < h->calls_opened &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    if (ended > h->calls_opened) {
      Fail(absl::StrCat("the server ended ", ended - h->calls_opened,
                        " more calls than were opened (a call it dropped "
                        "came back)"),
           input);
    }
    if (ended < h->calls_opened) {
      if (!plan.cancel) Fail("the server never ended the call", input);
      // gRPC drops a call cancelled before it reached the service.
      --h->calls_opened;
    }
    if (const int left = h->service->WaitForCalls(absl::Now() + kSettle);
        left != 0) {
      Fail(absl::StrCat(left, " calls still in progress"), input);
    }
    std::optional<std::vector<JobRecord>> jobs = h->jobs.WaitIdle(kSettle);
    if (!jobs.has_value()) Fail("a job never ended", input);
    return *std::move(jobs);
  };
  if (plan.calibrate) {
    const auto r = RunCall<CalibrateRequest, CalibrateResponse>(
        plan, [&](grpc::ClientContext* c) { return h->stub->Calibrate(c); },
        ToCalibrate);
    Check(r, expected, plan, settle(), input);
  } else {
    const auto r = RunCall<QuantizeRequest, QuantizeResponse>(
        plan, [&](grpc::ClientContext* c) { return h->stub->Quantize(c); },
        ToQuantize);
    Check(r, expected, plan, settle(), input);
  }

  // The service is back to idle: no job slot or upload charge held (given
  // back a moment after the last reaction).
  const absl::Time give_up = absl::Now() + kSettle;
  for (const char* gauge : {"quantd_inflight_jobs", "quantd_queued_jobs",
                            "quantd_uploading_bytes"}) {
    double value;
    while ((value = GaugeValue(*h->metrics, gauge)) != 0 &&
           absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    if (value != 0) Fail(absl::StrCat(gauge, " stays at ", value), input);
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  quantd::v1::ServerInfo info;
  const grpc::Status s = h->stub->GetServerInfo(
      &context, quantd::v1::GetServerInfoRequest(), &info);
  if (!s.ok() || info.limits().max_model_bytes() != kMaxModelBytes) {
    Fail("GetServerInfo after the call: " + Describe(s), input);
  }
  return 0;
}
