#include "backend/cuda/kernel_trace.h"

#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <cupti_result.h>
#include <cxxabi.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include "backend/cuda/shared_library.h"
#include "core/error.h"

namespace serve8 {

namespace {

struct CuptiApi {
  decltype(&cuptiActivityRegisterCallbacks) RegisterCallbacks;
  decltype(&cuptiActivityEnable) Enable;
  decltype(&cuptiActivityDisable) Disable;
  decltype(&cuptiActivityFlushAll) FlushAll;
  decltype(&cuptiActivityGetNextRecord) GetNextRecord;
  decltype(&cuptiGetResultString) GetResultString;
};

const CuptiApi& cupti() {
  static const CuptiApi api = [] {
    // CUPTI's soname carries the toolkit's major version.
    static const SharedLibrary lib("CUPTI", "libcupti.so." + std::to_string(CUDART_VERSION / 1000),
                                   " (the CUDA toolkit's CUPTI; only bench-one-batch --trace-steps needs it)");
    CuptiApi a{};
    lib.bind("cuptiActivityRegisterCallbacks", a.RegisterCallbacks);
    lib.bind("cuptiActivityEnable", a.Enable);
    lib.bind("cuptiActivityDisable", a.Disable);
    lib.bind("cuptiActivityFlushAll", a.FlushAll);
    lib.bind("cuptiActivityGetNextRecord", a.GetNextRecord);
    lib.bind("cuptiGetResultString", a.GetResultString);
    return a;
  }();
  return api;
}

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = "unknown error";
  cupti().GetResultString(r, &s);
  fail("kernel trace: {} failed: {}", what, s);
}

// CUPTI hands records to these process-wide callbacks, from its own thread.
std::mutex g_mutex;
std::vector<KernelSpan> g_spans;
constexpr size_t kBufferBytes = size_t{8} << 20;

// "void ns::(anonymous namespace)::name<T, 4>(Params)" -> "name"; cuBLASLt's plain names as they are.
std::string short_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  // "(anonymous namespace)::" first: its parenthesis would end the name before it begins.
  constexpr std::string_view kAnonymous = "(anonymous namespace)::";
  for (size_t at; (at = s.find(kAnonymous)) != std::string::npos;) s.erase(at, kAnonymous.size());
  const size_t end = s.find_first_of("<(");
  if (end != std::string::npos) s.resize(end);
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s.erase(0, colon + 2);
  const size_t space = s.rfind(' ');
  if (space != std::string::npos) s.erase(0, space + 1);
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    while (cupti().GetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      g_spans.push_back({short_name(k->name), k->start, k->end});
    }
  }
  std::free(buffer);
}

}  // namespace

KernelTrace::~KernelTrace() {
  if (on_) cupti().Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
}

void KernelTrace::start() {
  if (on_) return;
  static const bool registered = [] {
    check(cupti().RegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    return true;
  }();
  (void)registered;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    g_spans.clear();
  }
  check(cupti().Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)");
  on_ = true;
}

std::vector<KernelSpan> KernelTrace::stop() {
  if (!on_) return {};
  on_ = false;
  check(cupti().Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");
  check(cupti().FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const std::lock_guard<std::mutex> lock(g_mutex);
  return std::move(g_spans);
}

}  // namespace serve8
