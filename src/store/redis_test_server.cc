#include "store/redis_test_server.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace kvc {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kStartDeadline = std::chrono::seconds(10);
constexpr auto kClusterDeadline = std::chrono::seconds(30);
constexpr int kAdminTimeoutMs = 10'000;
// Slot migration moves keys in pages of this many.
constexpr int kMigratePage = 100;

// Every server process and folder the helper created and not yet cleaned up, for the atexit
// handler. Never destroyed, so it is still there when that handler runs.
struct Registry {
  std::mutex mutex;
  std::set<pid_t> pids;
  std::set<std::string> folders;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

void KillAndReap(pid_t pid) {
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void CleanUpAtExit() {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mutex);
  for (pid_t pid : r.pids) KillAndReap(pid);
  r.pids.clear();
  for (const std::string& folder : r.folders) {
    std::error_code ignored;
    fs::remove_all(folder, ignored);
  }
  r.folders.clear();
}

void Register(pid_t pid, const std::string& folder) {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mutex);
  static const bool registered = std::atexit(CleanUpAtExit) == 0;
  (void)registered;
  if (pid > 0) r.pids.insert(pid);
  if (!folder.empty()) r.folders.insert(folder);
}

void UnregisterPid(pid_t pid) {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mutex);
  r.pids.erase(pid);
}

void UnregisterFolder(const std::string& folder) {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mutex);
  r.folders.erase(folder);
}

Result<std::string> FindRedisServer() {
  if (const char* s = std::getenv("KVCODEC_REDIS_SERVER"); s != nullptr && *s != '\0') {
    if (::access(s, X_OK) == 0) return std::string(s);
    return NotFound(std::string("$KVCODEC_REDIS_SERVER=") + s + " is not an executable");
  }
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/redis-server";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return NotFound(
      "redis-server not found on PATH: the Redis store tests need a real server (Debian: apt-get install "
      "redis-server; or set KVCODEC_REDIS_SERVER)");
}

bool PortIsFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // As redis-server itself does: a port with connections in TIME_WAIT is free for a listener.
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

std::string Flatten(const redisReply& r) {
  switch (r.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      return r.str != nullptr ? std::string(r.str, r.len) : std::string();
    case REDIS_REPLY_INTEGER:
      return std::to_string(r.integer);
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r.elements; ++i) {
        if (i > 0) out += '\n';
        if (r.element[i] != nullptr) out += Flatten(*r.element[i]);
      }
      return out;
    }
    default:
      return "";
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::string LogTail(const std::string& path) {
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  return text.size() > 1500 ? "..." + text.substr(text.size() - 1500) : text;
}

// Folders of earlier test binaries that were killed before they could clean up (the servers
// themselves died with them): kvc-redis-<pid>-XXXXXX whose process is gone.
void RemoveFoldersOfDeadRuns() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("kvc-redis-")) continue;
    const long pid = std::strtol(name.c_str() + 10, nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
}

}  // namespace

Result<int> PickFreeLoopbackPort() {
  // Below the usual ephemeral range (32768+), so outgoing connections rarely take our ports;
  // random, so concurrent test binaries rarely pick the same ones.
  std::mt19937 rng(std::random_device{}() ^ static_cast<uint32_t>(::getpid()));
  std::uniform_int_distribution<int> pick(20000, 29999);
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int port = pick(rng);
    if (PortIsFree(port) && PortIsFree(port + 10000)) return port;
  }
  return IoError("no free loopback port found in 20000..29999");
}

Result<std::string> RunRedisCommand(int port, const std::vector<std::string>& args, const std::string& password) {
  const timeval tv{.tv_sec = kAdminTimeoutMs / 1000, .tv_usec = 0};
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(redisConnectWithTimeout("127.0.0.1", port, tv), redisFree);
  const std::string where = "127.0.0.1:" + std::to_string(port);
  if (c == nullptr) return IoError(where + ": cannot allocate a connection");
  if (c->err != 0) return IoError(where + ": " + c->errstr);
  if (redisSetTimeout(c.get(), tv) != REDIS_OK) return IoError(where + ": " + c->errstr);
  if (!password.empty()) {
    const char* auth[] = {"AUTH", password.c_str()};
    const size_t lengths[] = {4, password.size()};
    std::unique_ptr<redisReply, void (*)(void*)> reply(
        static_cast<redisReply*>(redisCommandArgv(c.get(), 2, auth, lengths)), freeReplyObject);
    if (reply == nullptr) return IoError(where + ": AUTH: " + c->errstr);
    if (reply->type == REDIS_REPLY_ERROR) return IoError(where + ": AUTH: " + Flatten(*reply));
  }
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  std::unique_ptr<redisReply, void (*)(void*)> reply(
      static_cast<redisReply*>(redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lengths.data())),
      freeReplyObject);
  if (reply == nullptr) return IoError(where + ": " + c->errstr);
  if (reply->type == REDIS_REPLY_ERROR) return IoError(where + ": " + Flatten(*reply));
  return Flatten(*reply);
}

Result<std::unique_ptr<RedisTestServer>> RedisTestServer::Start(bool cluster_node) {
  return Start(RedisTestServerOptions{.cluster_node = cluster_node});
}

Result<std::unique_ptr<RedisTestServer>> RedisTestServer::Start(const RedisTestServerOptions& options) {
  RETURN_IF_ERROR(FindRedisServer().status());
  static const bool swept = (RemoveFoldersOfDeadRuns(), true);
  (void)swept;
  std::string pattern = (fs::temp_directory_path() / ("kvc-redis-" + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) return IoError("mkdtemp " + pattern + ": " + std::strerror(errno));
  Register(-1, pattern);
  std::unique_ptr<RedisTestServer> server(new RedisTestServer(pattern, options));
  // Another process may take the port between the check and the server's bind: try again.
  Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSIGN_OR_RETURN(const int port, PickFreeLoopbackPort());
    last = server->Launch(port);
    if (last.ok()) return server;
  }
  return last;
}

Status RedisTestServer::Launch(int port) {
  ASSIGN_OR_RETURN(const std::string binary, FindRedisServer());
  const std::string log = folder_ + "/redis.log";
  std::vector<std::string> args = {binary,  "--port", std::to_string(port), "--bind", "127.0.0.1",
                                   "--dir", folder_,  "--logfile",          log};
  // Nothing goes to disk: a test server's data dies with it.
  for (const char* a : {"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"}) {
    args.emplace_back(a);
  }
  if (!options_.password.empty()) {
    for (const char* a : {"--requirepass", "--masterauth"}) {
      args.emplace_back(a);
      args.push_back(options_.password);
    }
  }
  if (options_.cluster_node) {
    for (const char* a : {"--cluster-enabled", "yes", "--cluster-node-timeout", "5000", "--cluster-config-file"}) {
      args.emplace_back(a);
    }
    args.push_back(folder_ + "/nodes.conf");
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return IoError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  Register(pid, "");
  pid_ = pid;
  port_ = port;

  const auto deadline = Clock::now() + kStartDeadline;
  while (Clock::now() < deadline) {
    int wstatus = 0;
    if (::waitpid(pid, &wstatus, WNOHANG) == pid) {
      UnregisterPid(pid);
      pid_ = -1;
      return IoError(FormatMessage("redis-server on port %d exited at start (status %d); log:\n", port, wstatus) +
                     LogTail(log));
    }
    // The process id tells our server from anything else that might answer on this port.
    if (Result<std::string> info = RunRedisCommand(port, {"INFO", "server"}, options_.password);
        info.ok() && info->find("process_id:" + std::to_string(pid) + "\r") != std::string::npos) {
      for (const std::vector<std::string>& user : options_.acl_users) {
        std::vector<std::string> command = {"ACL", "SETUSER"};
        command.insert(command.end(), user.begin(), user.end());
        if (Status s = RunRedisCommand(port, command, options_.password).status(); !s.ok()) {
          Stop();
          return s;
        }
      }
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Stop();
  return IoError(FormatMessage("redis-server on port %d did not answer within %lld s; log:\n", port,
                               static_cast<long long>(kStartDeadline.count())) +
                 LogTail(log));
}

RedisTestServer::~RedisTestServer() {
  Stop();
  std::error_code ignored;
  fs::remove_all(folder_, ignored);
  UnregisterFolder(folder_);
}

void RedisTestServer::Stop() {
  if (pid_ <= 0) return;
  KillAndReap(pid_);
  UnregisterPid(pid_);
  pid_ = -1;
}

Status RedisTestServer::Restart() {
  Stop();
  return Launch(port_);
}

void RedisTestServer::Pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisTestServer::Resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

Result<std::unique_ptr<RedisTestCluster>> RedisTestCluster::Start(int masters, const std::string& password) {
  if (masters < 1) return InvalidArgument("a cluster needs at least one master");
  std::unique_ptr<RedisTestCluster> cluster(new RedisTestCluster);
  cluster->password_ = password;
  for (int i = 0; i < masters; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<RedisTestServer> node,
                     RedisTestServer::Start(RedisTestServerOptions{.cluster_node = true, .password = password}));
    ASSIGN_OR_RETURN(std::string id, node->Command({"CLUSTER", "MYID"}));
    cluster->nodes_.push_back(std::move(node));
    cluster->ids_.push_back(std::move(id));
  }
  cluster->slot_owner_.resize(16384);
  for (int i = 0; i < masters; ++i) {
    const int first = i * 16384 / masters;
    const int last = (i + 1) * 16384 / masters - 1;
    for (int s = first; s <= last; ++s) cluster->slot_owner_[static_cast<size_t>(s)] = static_cast<size_t>(i);
    RedisTestServer& node = *cluster->nodes_[static_cast<size_t>(i)];
    RETURN_IF_ERROR(node.Command({"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)}).status());
    // Distinct epochs up front, so the nodes need not resolve a collision before agreeing.
    RETURN_IF_ERROR(node.Command({"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)}).status());
  }
  // Every pair meets directly: learning of the others through gossip alone takes seconds.
  for (size_t i = 0; i < cluster->nodes_.size(); ++i) {
    for (size_t j = i + 1; j < cluster->nodes_.size(); ++j) {
      const std::string port = std::to_string(cluster->nodes_[j]->port());
      RETURN_IF_ERROR(cluster->nodes_[i]->Command({"CLUSTER", "MEET", "127.0.0.1", port}).status());
    }
  }
  const auto deadline = Clock::now() + kClusterDeadline;
  const std::string known = "cluster_known_nodes:" + std::to_string(masters) + "\r";
  std::string last_info;
  while (Clock::now() < deadline) {
    bool all_ok = true;
    for (const auto& node : cluster->nodes_) {
      Result<std::string> info = node->Command({"CLUSTER", "INFO"});
      last_info = info.ok() ? *info : info.status().ToString();
      if (!info.ok() || info->find("cluster_state:ok\r") == std::string::npos ||
          info->find(known) == std::string::npos) {
        all_ok = false;
        break;
      }
    }
    if (all_ok) return cluster;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return IoError("the test cluster did not reach cluster_state:ok; last CLUSTER INFO:\n" + last_info);
}

std::string RedisTestCluster::SeedList() const {
  std::string out;
  for (const auto& node : nodes_) out += (out.empty() ? "" : ",") + node->address();
  return out;
}

Status RedisTestCluster::FlushAll() {
  for (const auto& node : nodes_) RETURN_IF_ERROR(node->Command({"FLUSHALL"}).status());
  return Status::Ok();
}

Status RedisTestCluster::BeginMigration(int slot, size_t to) {
  const size_t from = OwnerOf(slot);
  const std::string s = std::to_string(slot);
  RETURN_IF_ERROR(nodes_[to]->Command({"CLUSTER", "SETSLOT", s, "IMPORTING", ids_[from]}).status());
  return nodes_[from]->Command({"CLUSTER", "SETSLOT", s, "MIGRATING", ids_[to]}).status();
}

Status RedisTestCluster::MigrateKey(int slot, const std::string& key, size_t to) {
  const size_t from = OwnerOf(slot);
  std::vector<std::string> command = {"MIGRATE", "127.0.0.1", std::to_string(nodes_[to]->port()),
                                      key,       "0",         std::to_string(kAdminTimeoutMs)};
  // The receiving node wants the password too.
  if (!password_.empty()) {
    command.emplace_back("AUTH");
    command.push_back(password_);
  }
  ASSIGN_OR_RETURN(const std::string answer, nodes_[from]->Command(command));
  if (answer != "OK") return IoError("MIGRATE " + key + " answered '" + answer + "'");
  return Status::Ok();
}

Status RedisTestCluster::FinishMigration(int slot, size_t to) {
  const size_t from = OwnerOf(slot);
  const std::string s = std::to_string(slot);
  while (true) {
    ASSIGN_OR_RETURN(const std::string keys,
                     nodes_[from]->Command({"CLUSTER", "GETKEYSINSLOT", s, std::to_string(kMigratePage)}));
    const std::vector<std::string> page = Lines(keys);
    if (page.empty()) break;
    for (const std::string& key : page) RETURN_IF_ERROR(MigrateKey(slot, key, to));
  }
  // The new owner first, so that no node sends clients to an owner that does not know yet.
  RETURN_IF_ERROR(nodes_[to]->Command({"CLUSTER", "SETSLOT", s, "NODE", ids_[to]}).status());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (i != to) RETURN_IF_ERROR(nodes_[i]->Command({"CLUSTER", "SETSLOT", s, "NODE", ids_[to]}).status());
  }
  slot_owner_[static_cast<size_t>(slot)] = to;
  return Status::Ok();
}

Status RedisTestCluster::MoveSlot(int slot, size_t to) {
  if (OwnerOf(slot) == to) return Status::Ok();
  RETURN_IF_ERROR(BeginMigration(slot, to));
  return FinishMigration(slot, to);
}

Status RedisTestCluster::MakeSlotStable(int slot) {
  for (const auto& node : nodes_) {
    RETURN_IF_ERROR(node->Command({"CLUSTER", "SETSLOT", std::to_string(slot), "STABLE"}).status());
  }
  return Status::Ok();
}

}  // namespace kvc
