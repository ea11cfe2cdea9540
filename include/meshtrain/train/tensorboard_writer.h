// TensorBoardWriter: scalars in TensorBoard's event-file format, written without TensorFlow or protobuf.
//
// File: <dir>/events.out.tfevents.<unix time>.<host>.<pid>, a sequence of TFRecords, each
//   uint64 length (little-endian) | uint32 masked CRC-32C of the 8 length bytes | data | uint32 masked CRC-32C
//   of data,   masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8
// and each record's data an Event protobuf (tensorflow/core/util/event.proto), encoded by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// Text (TensorBoard's text plugin) is a Value holding a string tensor instead of simple_value:
//   Value { string tag = 1; TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//   TensorProto { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto tensor_shape = 2; bytes string_val = 8; }
//   SummaryMetadata { PluginData plugin_data = 1; }   PluginData { string plugin_name = 1 ("text"); }
// The first record carries file_version "brain.Event:2", as TensorFlow's writer does.
//
// Crash safety: each record reaches the file in one write(2) on an O_APPEND descriptor, so a killed process
// leaves whole records only; a torn last record (power loss) is one that TensorBoard's reader stops at, so
// everything before it stays readable.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace meshtrain::train {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it. UserError naming `what` (the config key) when it cannot.
  TensorBoardWriter(const std::string& dir, const std::string& what);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding every (tag, value) as a scalar.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars, double wall_time);
  // Every number in `record` (a metrics JSONL line) except "step", nested objects and arrays flattened into
  // slash-separated tags ("gpu/3/power_w"); booleans count as 0/1, strings are left out.
  void add_record(const nlohmann::json& record, double wall_time);
  // One event at `step` holding `text` under `tag` for TensorBoard's text tab (Markdown).
  void add_text(int64_t step, const std::string& tag, const std::string& text, double wall_time);

  // The run's hyperparameters for TensorBoard's HParams tab (the hparams plugin's session start, at step 0):
  // numbers, booleans and strings as such, anything else as its JSON text.
  //   Value { tag "_hparams_/session_start_info"; metadata.plugin_data { "hparams", content =
  //     HParamsPluginData { version 0; session_start_info { hparams map; start_time_secs } } } }
  void add_hparams(const std::vector<std::pair<std::string, nlohmann::json>>& hparams, double wall_time);

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  int fd_ = -1;
};

// The (tag, value) pairs add_record writes for `record`, in the record's key order.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::json& record);

}  // namespace meshtrain::train
