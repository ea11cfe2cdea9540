// meta.json as read back (ckpt/checkpoint_meta.h): a malformed document or a field of another type is one line
// naming the file and the field — never the JSON library's message — and a shard's file is a plain name
// inside the checkpoint directory, never a path to read elsewhere.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_meta.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/resume_candidates.h"
#include "meshtrain/core/error.h"
#include "support/json_file.h"
#include "support/test_support.h"

using namespace meshtrain;
using testing_support::temp_dir;
using testing_support::user_error;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// A real meta.json (one tensor, a trainer's data position and LoRA record), as the writer leaves it.
Json written_meta() {
  const fs::path d = temp_dir("meta_fields");
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  const std::string step =
      m.save(4, {{"model.w", at::ones({4, 8})}},
             {{"data", {{"epoch", 0}, {"cursor", 4}}},
              {"lora",
               {{"rank", 4}, {"alpha", 8.0}, {"targets", {"q", "v"}}, {"adapters_only", false}, {"id", "seed 1"}}}});
  return testing_support::read_json_file(fs::path(step) / "meta.json");
}

// meta_from_json's message for `j` read as "run/step_4/meta.json".
std::string meta_error(const Json& j) {
  return user_error([&] { ckpt::meta_from_json(j, "run/step_4/meta.json"); });
}

void expect_one_line(const std::string& msg, const std::string& want) {
  EXPECT_EQ(msg.rfind("run/step_4/meta.json: ", 0), 0u) << msg;
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
}

}  // namespace

TEST(CheckpointMetaFields, TheWrittenMetaReadsBack) {
  const auto m = ckpt::meta_from_json(written_meta(), "meta.json");
  EXPECT_EQ(m.step, 4);
  EXPECT_EQ(m.tensors.size(), 1u);
  EXPECT_EQ(m.state["lora"]["rank"], 4);
}

TEST(CheckpointMetaFields, NotAnObject) {
  expect_one_line(meta_error(Json(5)), "the document is 5 (a number); valid a JSON object");
  expect_one_line(meta_error(Json::array({1, 2})), "the document is [1,2] (an array); valid a JSON object");
  expect_one_line(meta_error(Json("x")), "the document is \"x\" (a string); valid a JSON object");
}

TEST(CheckpointMetaFields, AFieldOfAnotherTypeIsNamed) {
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j["format_version"] = "2"; }, "format_version is \"2\" (a string); valid 1 or 2"},
      {[](Json& j) { j["step"] = "4"; }, "step is \"4\" (a string); valid an integer"},
      {[](Json& j) { j.erase("step"); }, "step is missing; valid an integer"},
      {[](Json& j) { j["world_size"] = 0; }, "world_size is 0 (a number); valid an integer ≥ 1"},
      {[](Json& j) { j["config"] = 5; }, "config is 5 (a number); valid an object"},
      {[](Json& j) { j["mesh"] = Json::array(); }, "mesh is [] (an array); valid an object"},
      {[](Json& j) { j["mesh"] = {{"layout", 3}}; }, "mesh.layout is 3 (a number); valid a string"},
      {[](Json& j) { j["state"] = "x"; }, "state is \"x\" (a string); valid an object"},
      {[](Json& j) { j["state"]["data"]["epoch"] = "0"; }, "state.data.epoch is \"0\" (a string); valid an integer"},
      {[](Json& j) { j["state"]["lora"] = 5; }, "state.lora is 5 (a number); valid an object"},
      {[](Json& j) { j["state"]["lora"]["rank"] = "4"; }, "state.lora.rank is \"4\" (a string); valid an integer"},
      {[](Json& j) { j["state"]["lora"]["adapters_only"] = "yes"; }, "state.lora.adapters_only is \"yes\""},
      {[](Json& j) { j["state"]["lora"]["targets"] = 7; }, "state.lora.targets is 7 (a number)"},
      {[](Json& j) { j["state"]["imported_from"] = 1; }, "state.imported_from is 1 (a number); valid a string"},
      {[](Json& j) { j["tensors"] = 5; }, "tensors is 5 (a number); valid an object of tensors"},
      {[](Json& j) { j["tensors"]["model.w"] = 5; }, "tensors['model.w'] is 5 (a number); valid an object"},
      {[](Json& j) { j["tensors"]["model.w"]["shape"] = {"4", 8}; },
       "tensors['model.w'].shape is [\"4\",8] (an array); valid a list of integers"},
      {[](Json& j) { j["tensors"]["model.w"]["dtype"] = 32; },
       "tensors['model.w'].dtype is 32 (a number); valid a string"},
      {[](Json& j) { j["tensors"]["model.w"]["shards"] = Json::object(); },
       "tensors['model.w'].shards is {} (an object)"},
      {[](Json& j) { j["tensors"]["model.w"]["shards"][0] = 1; }, "tensors['model.w'].shards[0] is 1 (a number)"},
      {[](Json& j) { j["tensors"]["model.w"]["shards"][0]["byte_range"] = {0}; },
       "tensors['model.w'].shards[0].byte_range is [0] (an array); valid [begin, end], two integers"},
      {[](Json& j) { j["tensors"]["model.w"]["shards"][0]["crc32c"] = "x"; },
       "tensors['model.w'].shards[0].crc32c is \"x\" (a string); valid a CRC-32"},
  };
  for (const auto& [edit, want] : cases) {
    Json j = written_meta();
    edit(j);
    expect_one_line(meta_error(j), want);
  }
}

// A shard's file of /etc/passwd or ../../../../etc/passwd was opened and read (refused only by its size): the
// file must be a plain name inside the checkpoint directory. Checked where meta.json is read, so no reader
// (resume, generate, eval, export) opens it.
TEST(CheckpointMetaFields, ShardFileIsAPlainNameInsideTheCheckpoint) {
  for (const std::string file : {"/etc/passwd", "../../../../etc/passwd", "sub/rank_00000.safetensors", "..", ""}) {
    Json j = written_meta();
    j["tensors"]["model.w"]["shards"][0]["file"] = file;
    expect_one_line(meta_error(j), "tensors['model.w'].shards[0].file is \"" + file +
                                       "\" (a string); valid a file name inside the checkpoint directory");
  }
  const fs::path d = temp_dir("meta_shard_path");
  ckpt::CheckpointManager m(d.string(), 0, nullptr);
  const fs::path step = m.save(1, {{"model.w", at::ones({4, 8})}}, {});
  Json j = testing_support::read_json_file(step / "meta.json");
  j["tensors"]["model.w"]["shards"][0]["file"] = "/etc/passwd";
  std::ofstream(step / "meta.json", std::ios::trunc) << j.dump();
  const std::string msg = user_error([&] { ckpt::load_full(d.string()); });
  EXPECT_NE(msg.find((step / "meta.json").string() + ": tensors['model.w'].shards[0].file is \"/etc/passwd\""),
            std::string::npos) << msg;
  EXPECT_NE(ckpt::verify_checkpoint(step.string()).find("shards[0].file"), std::string::npos);
}
