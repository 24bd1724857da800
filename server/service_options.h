// What the QuantizationService needs to know from the operator: limits,
// budgets and the token. Server::Options maps the flags onto it.
#ifndef QUANTD_SERVER_SERVICE_OPTIONS_H_
#define QUANTD_SERVER_SERVICE_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace quantd::server {

struct ServiceOptions {
  // Largest model a client may declare; bigger ones are refused
  // (RESOURCE_EXHAUSTED) before any chunk is read.
  uint64_t max_model_bytes = uint64_t{1} << 30;
  // Model bytes all calls still uploading may hold together. A call's
  // declared size is charged when its config arrives and given back once
  // its job is submitted (the job limit governs from then on) or the call
  // ends; a config that would go over is RESOURCE_EXHAUSTED at once, so
  // idle uploads cannot pin the server's memory. 0: no budget.
  uint64_t max_uploading_bytes = uint64_t{2} << 30;
  // Size of the output model chunks we send.
  uint64_t model_chunk_bytes = uint64_t{1} << 20;
  // The transport's message limit, enforced by the Server; reported in
  // GetServerInfo so clients can size their chunks.
  uint64_t max_message_bytes = uint64_t{16} << 20;
  // Calibration batches one call may send (Calibrate, or Quantize with
  // inline calibration); more is RESOURCE_EXHAUSTED.
  uint64_t max_calibration_batches = 100000;
  // Batches buffered per call between the stream and the core job. The
  // next batch is read from the stream only when the queue has room, so a
  // client that sends faster than core calibrates is held back by gRPC
  // flow control, and a call holds at most this many batches (plus the
  // one being read) in memory.
  size_t calibration_queue_batches = 4;
  // Quantize/Calibrate jobs running in core at once. 0: twice the core
  // threads.
  int max_concurrent_jobs = 0;
  // Calls (model received) that wait for a job slot when all are taken,
  // first come first served; one more is refused at once with
  // RESOURCE_EXHAUSTED, and so is every call beyond the slots when 0;
  // negative: twice the job slots. A waiting call holds its model in
  // memory, charged to max_uploading_bytes until it gets its slot; its
  // deadline, a cancel or max_call_duration takes it out of the queue.
  int max_queued_jobs = 0;
  // Longest a Quantize/Calibrate call may take, from its first message to
  // its status, whatever deadline the client set (or none): past it the
  // call ends DEADLINE_EXCEEDED and its job is cancelled. Zero or
  // negative: no cap.
  absl::Duration max_call_duration = absl::ZeroDuration();
  // When not empty, every call must carry `authorization: Bearer <token>`
  // (else UNAUTHENTICATED); see server/auth.h.
  std::string bearer_token;
};

}  // namespace quantd::server

#endif  // QUANTD_SERVER_SERVICE_OPTIONS_H_
