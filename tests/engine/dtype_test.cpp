// --dtype (EngineArgs::dtype): the compute dtypes each device takes, and errors that name the flag.
// The backend is made before any weights are read, so a bad choice fails at once.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "core/error.h"
#include "stories_fixture.h"

namespace serve8 {
namespace {

using testing::stories_args;

// The message of the serve8::Error that create_engine throws, or "" without one.
std::string engine_error(const std::string& device, const std::string& dtype) {
  EngineArgs a;
  a.model_path = "/nonexistent/model";  // never reached
  a.device = device;
  a.dtype = dtype;
  try {
    create_engine(a);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Dtype, CpuComputesInFp32AndAutoKvFollows) {
  for (const char* name : {"auto", "float32", "float", "fp32"}) {
    EngineArgs a = stories_args("auto");
    a.dtype = name;
    auto engine = create_engine(a);
    EXPECT_EQ(engine->backend().compute_dtype(), DType::kF32) << name;
    EXPECT_EQ(engine->kv_config().dtype, DType::kF32) << name;
  }
}

TEST(Dtype, RefusedChoicesNameTheFlag) {
  const auto expect = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << msg << "' lacks '" << part << "'";
  };
  for (const char* name : {"bfloat16", "bf16"}) {
    const std::string msg = engine_error("cpu", name);
    expect(msg, "--dtype");
    expect(msg, "fp32 only");
  }
  for (const char* name : {"float16", "half"}) {
    for (const char* device : {"cpu", "cuda"}) expect(engine_error(device, name), "fp16 compute is not supported yet");
  }
  expect(engine_error("cpu", "int8"), "unknown --dtype 'int8'");
}

TEST(Dtype, CreateBackend) {
  EXPECT_EQ(create_backend("cpu")->compute_dtype(), DType::kF32);
  EXPECT_EQ(create_backend("cpu", DType::kF32)->compute_dtype(), DType::kF32);
  EXPECT_THROW(create_backend("cpu", DType::kBF16), Error);
  EXPECT_THROW(create_backend("cpu", DType::kF16), Error);
  EXPECT_THROW(create_backend("tpu", DType::kF32), Error);
  // Whatever the machine: no GPU, no CUDA build, or a CUDA backend refusing fp16 compute.
  EXPECT_THROW(create_backend("cuda", DType::kF16), Error);
}

}  // namespace
}  // namespace serve8
