// The one contract every store backend is tested against (store_contract_test.cc). A backend's
// test file instantiates the suite with a factory that opens a fresh, empty store:
//   INSTANTIATE_TEST_SUITE_P(Memory, StoreContract, ::testing::Values(StoreFactory{"memory", ...}));
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace kvc {

struct StoreFactory {
  std::string name;
  // A fresh, empty store bounded to `capacity_bytes` (0: the backend's default). Backends that
  // cannot bound their bytes themselves (Redis) say so with bounded = false.
  std::function<Result<std::unique_ptr<Store>>(uint64_t capacity_bytes)> open;
  bool bounded = true;
  // The bytes Stats counts for a payload of `payload_bytes` stored under `name`: the payload
  // itself for a bare backend, more for a store that wraps objects (bound_store.h). Empty: the
  // payload.
  std::function<uint64_t(std::string_view name, uint64_t payload_bytes)> stored_bytes;
};

inline std::string StoreFactoryName(const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; }
// Reproducible test payloads.
inline std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

// For gtest's listings (ctest shows them): the backend's name, not the struct's bytes.
inline void PrintTo(const StoreFactory& factory, std::ostream* os) { *os << factory.name; }

class StoreContract : public ::testing::TestWithParam<StoreFactory> {};

// ---------------------------------------------------------------------------------------------
// For tests of what a hostile store does to a reader (here and in the fetcher's tests): the check
// runs in a forked child, so that a crash, a hang or an allocation past a memory limit fails the
// test instead of taking the test binary down with it.

// ASan reserves terabytes of shadow memory: no address-space limit fits it.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
// Under ASan and TSan an allocation the sanitizer's allocator cannot make is a fatal report, not
// a failed allocation: checks that need one to fail are left out there.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kAllocationsCanFail = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kAllocationsCanFail = false;
#else
inline constexpr bool kAllocationsCanFail = !kUnderAddressSanitizer;
#endif
#else
inline constexpr bool kAllocationsCanFail = !kUnderAddressSanitizer;
#endif

// The process's mapped address space now (what RLIMIT_AS counts).
inline uint64_t AddressSpaceBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// The peak resident set of this process, in bytes.
inline uint64_t MaxRssBytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

struct ChildLimits {
  unsigned alarm_s = 30;  // SIGALRM past this: a check that hangs fails instead of hanging the suite
  // RLIMIT_AS at the child's address space plus this much (0: no limit). Not under
  // AddressSanitizer, whose shadow memory needs terabytes of address space.
  uint64_t address_space_headroom = 0;
};

// Runs `check` in a forked child under `limits`: "" when it returned "" and the child exited
// cleanly, else what it returned or how the child died (a signal: SIGALRM when it hung, SIGSEGV
// when it crashed), or the exception that escaped it. `check` must not use gtest assertions.
inline std::string RunInChild(const std::function<std::string()>& check, const ChildLimits& limits = {}) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(limits.alarm_s);
    if (limits.address_space_headroom > 0 && !kUnderAddressSanitizer) {
      const rlimit limit{AddressSpaceBytes() + limits.address_space_headroom, RLIM_INFINITY};
      ::setrlimit(RLIMIT_AS, &limit);
    }
    std::string said;
    // An exception must end the child here: past this frame gtest would catch it and go on
    // running the parent's remaining tests in the child.
    try {
      said = check();
    } catch (const std::exception& e) {
      said = std::string("an exception escaped: ") + e.what();
    } catch (...) {
      said = "an exception escaped";
    }
    for (size_t at = 0; at < said.size();) {
      const ssize_t n = ::write(fds[1], said.data() + at, said.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    // No destructors, atexit handlers or gtest teardown of the parent's state in the child.
    ::_exit(said.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return std::string("the child was killed by signal ") + std::to_string(sig) + " (" + ::strsignal(sig) + ")" +
           (sig == SIGALRM ? ": it hung" : "") + (said.empty() ? "" : ", after saying: " + said);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "the child exited with status " + std::to_string(WEXITSTATUS(status)) + ": " + said;
  }
  return said;
}

}  // namespace kvc
