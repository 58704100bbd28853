// The stored-object envelope (stored_object.h), its HMAC, and the decorator OpenStore puts in
// front of every backend (bound_store.h): an object is read only under the name it was written
// under, and with a secret only when a holder of that secret wrote it.
#include "store/stored_object.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "base/byte_io.h"
#include "base/crc32c.h"
#include "store/bound_store.h"
#include "store/chunk_key.h"
#include "store/chunk_manifest.h"
#include "store/hmac_sha256.h"
#include "store/memory_store.h"
#include "store/store.h"
#include "store/store_contract.h"

namespace kvc {
namespace {

std::vector<uint8_t> Text(std::string_view s) { return {s.begin(), s.end()}; }

std::string Hex(std::span<const uint8_t> b) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t v : b) {
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

ChunkKey Key(uint8_t seed) {
  ChunkKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(seed * 31 + i);
  return k;
}

bool Contains(const Status& s, std::string_view text) { return s.message().find(text) != std::string::npos; }

// ---------------------------------------------------------------------------------------------
// HMAC-SHA256: the test cases of RFC 4231 (section 4).

TEST(HmacSha256, Rfc4231TestVectors) {
  struct Case {
    std::vector<uint8_t> key, data;
    const char* mac;
  };
  const std::vector<uint8_t> aa131(131, 0xaa);
  const Case cases[] = {
      {std::vector<uint8_t>(20, 0x0b), Text("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {Text("Jefe"), Text("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::vector<uint8_t>(20, 0xaa), std::vector<uint8_t>(50, 0xdd),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25},
       std::vector<uint8_t>(50, 0xcd),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      // Test case 5 gives only the first 128 bits (truncation); the rest is checked below.
      {aa131, Text("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {aa131,
       Text("This is a test using a larger than block-size key and a larger than block-size data. The key needs to "
            "be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const Case& c : cases) {
    const Result<HmacSha256Tag> tag = HmacSha256(c.key, c.data);
    ASSERT_TRUE(tag.ok()) << tag.status().ToString();
    EXPECT_EQ(Hex(*tag), c.mac);
  }
  const Result<HmacSha256Tag> truncated = HmacSha256(std::vector<uint8_t>(20, 0x0c), Text("Test With Truncation"));
  ASSERT_TRUE(truncated.ok());
  EXPECT_EQ(Hex(std::span(*truncated).first(16)), "a3b6167473100ee06e0c796c2955552b");
  // Empty key and message (Python's hmac agrees).
  EXPECT_EQ(Hex(HmacSha256({}, {}).value()), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST(HmacSha256, EqualInConstantTimeComparesWholeSpans) {
  const std::vector<uint8_t> a = {1, 2, 3}, b = {1, 2, 3}, c = {1, 2, 4}, d = {1, 2};
  EXPECT_TRUE(EqualInConstantTime(a, b));
  EXPECT_FALSE(EqualInConstantTime(a, c));
  EXPECT_FALSE(EqualInConstantTime(a, d));
  EXPECT_TRUE(EqualInConstantTime({}, {}));
}

// ---------------------------------------------------------------------------------------------
// The envelope

const std::string kName = ChunkObjectName(Key(1), "kvtc", "16");

TEST(StoredObject, RoundTripsWithAndWithoutASecret) {
  for (const std::string secret : {"", "a secret"}) {
    for (const size_t n : {size_t{0}, size_t{1}, size_t{1000}}) {
      const std::vector<uint8_t> payload = Bytes(n, 3);
      const std::vector<uint8_t> object = SealStoredObject(kName, payload, secret).value();
      const ObjectSeal seal = secret.empty() ? ObjectSeal::kCrc32c : ObjectSeal::kHmacSha256;
      EXPECT_EQ(object.size(), n + StoredObjectOverhead(kName, seal));
      const Result<std::span<const uint8_t>> opened = OpenStoredObject(kName, object, secret);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      EXPECT_EQ(std::vector<uint8_t>(opened->begin(), opened->end()), payload);
      // Deterministic: the same bytes every time.
      EXPECT_EQ(SealStoredObject(kName, payload, secret).value(), object);
    }
  }
}

// The layout docs/format.md gives, byte for byte.
TEST(StoredObject, LayoutIsAsDocumented) {
  const std::vector<uint8_t> payload = {0xde, 0xad};
  const std::vector<uint8_t> object = SealStoredObject("ab.c", payload, "").value();
  // clang-format off
  const std::vector<uint8_t> head = {
      'K', 'V', 'C', 'O',        // magic
      1, 0, 0, 0,                // version
      1, 0, 0, 0,                // seal: CRC32C
      4, 0, 0, 0,                // name length
      'a', 'b', '.', 'c',        // name
      2, 0, 0, 0, 0, 0, 0, 0,    // payload length
      0xde, 0xad};               // payload
  // clang-format on
  ASSERT_EQ(object.size(), head.size() + 4);
  EXPECT_EQ(std::vector<uint8_t>(object.begin(), object.begin() + head.size()), head);
  const uint32_t crc = Crc32c(head.data(), head.size());
  EXPECT_EQ(object[head.size()], crc & 0xff);
  EXPECT_EQ(object[head.size() + 3], crc >> 24);

  const std::vector<uint8_t> mac = SealStoredObject("ab.c", payload, "k").value();
  ASSERT_EQ(mac.size(), head.size() + 32);
  EXPECT_EQ(mac[8], 2) << "seal 2: HMAC-SHA256";
  std::vector<uint8_t> mac_head = head;
  mac_head[8] = 2;
  EXPECT_EQ(std::vector<uint8_t>(mac.begin(), mac.begin() + head.size()), mac_head);
  const HmacSha256Tag tag = HmacSha256(Text("k"), mac_head).value();
  EXPECT_EQ(std::vector<uint8_t>(mac.begin() + head.size(), mac.end()), std::vector<uint8_t>(tag.begin(), tag.end()));
}

TEST(StoredObject, BadNamesAreRefusedWhenSealing) {
  for (const char* bad : {"", "a/b", ".hidden"}) {
    EXPECT_EQ(SealStoredObject(bad, Bytes(3, 1), "").status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// The finding: a valid object of another chunk (or another level of this one) moved to this
// chunk's name must not be read as this chunk.
TEST(StoredObject, AnObjectUnderAnotherNameIsCorrupt) {
  const std::string other_key = ChunkObjectName(Key(2), "kvtc", "16");
  const std::string other_level = ChunkObjectName(Key(1), "kvtc", "32");
  const std::string other_codec = ChunkObjectName(Key(1), "video", "16");
  for (const std::string secret : {"", "a secret"}) {
    const std::vector<uint8_t> object = SealStoredObject(kName, Bytes(100, 1), secret).value();
    for (const std::string& read_as : {other_key, other_level, other_codec, ChunkManifestName(Key(1))}) {
      const Status s = OpenStoredObject(read_as, object, secret).status();
      EXPECT_EQ(s.code(), StatusCode::kCorrupt) << read_as;
      EXPECT_EQ(s.message(), "stored object holds chunk '" + kName + "', read as '" + read_as + "'");
    }
  }
}

TEST(StoredObject, EveryDamagedOrTruncatedByteIsCorrupt) {
  for (const std::string secret : {"", "a secret"}) {
    const std::vector<uint8_t> good = SealStoredObject(kName, Bytes(64, 5), secret).value();
    for (size_t i = 0; i < good.size(); ++i) {
      for (const uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= flip;
        EXPECT_EQ(OpenStoredObject(kName, bad, secret).status().code(), StatusCode::kCorrupt)
            << "byte " << i << " secret '" << secret << "'";
      }
    }
    for (size_t n = 0; n < good.size(); ++n) {
      EXPECT_EQ(OpenStoredObject(kName, std::span(good).first(n), secret).status().code(), StatusCode::kCorrupt)
          << "truncated to " << n;
    }
    std::vector<uint8_t> longer = good;
    longer.push_back(0);
    const Status trailing = OpenStoredObject(kName, longer, secret).status();
    EXPECT_EQ(trailing.code(), StatusCode::kCorrupt);
    EXPECT_TRUE(Contains(trailing, "1 bytes after the end")) << trailing.ToString();
  }
}

TEST(StoredObject, MessagesSayWhatIsWrong) {
  const std::vector<uint8_t> crc = SealStoredObject(kName, Bytes(10, 1), "").value();
  const std::vector<uint8_t> mac = SealStoredObject(kName, Bytes(10, 1), "s1").value();
  const std::string where = "stored object '" + kName + "': ";
  auto message = [&](std::span<const uint8_t> object, std::string_view secret) {
    const Status s = OpenStoredObject(kName, object, secret).status();
    EXPECT_EQ(s.code(), StatusCode::kCorrupt);
    return s.message();
  };
  // A bare object, as kvcodec stored them before envelopes.
  const std::vector<uint8_t> manifest = WriteChunkManifest({.chunk_tokens = 4, .chunk_index = 0, .variants = {}});
  EXPECT_EQ(message(manifest, ""),
            where + "not a kvcodec stored object (bad magic; it may come from an older kvcodec)");
  EXPECT_EQ(message({}, ""), where + "not a kvcodec stored object (bad magic; it may come from an older kvcodec)");
  std::vector<uint8_t> v2 = crc;
  v2[4] = 2;
  EXPECT_EQ(message(v2, ""),
            where + "stored-object version 2, this build reads 1 (it may come from an older or newer kvcodec)");
  std::vector<uint8_t> seal9 = crc;
  seal9[8] = 9;
  EXPECT_EQ(message(seal9, ""), where + "unknown seal 9 (1: CRC32C, 2: HMAC-SHA256)");
  std::vector<uint8_t> damaged = crc;
  damaged[crc.size() - 6] ^= 1;
  EXPECT_EQ(message(damaged, ""), where + "CRC32C mismatch (damaged)");
  EXPECT_EQ(message(mac, "s2"), where +
                                    "not authenticated by this store's secret (HMAC-SHA256 mismatch: damaged, forged "
                                    "or written with another secret)");
  EXPECT_EQ(message(crc, "s1"), where +
                                    "not authenticated by this store's secret (sealed with a CRC32C only: written "
                                    "without --store-secret)");
  EXPECT_EQ(message(mac, ""), where + "sealed with a secret (HMAC-SHA256), and this store has none (--store-secret)");
  const std::string truncated = message(std::span(crc).first(crc.size() - 1), "");
  EXPECT_TRUE(truncated.starts_with(where + "truncated")) << truncated;
  // A hostile name read back is quoted on one line.
  const Status odd = OpenStoredObject("a\nb", crc, "").status();
  EXPECT_EQ(odd.message(), "stored object holds chunk '" + kName + "', read as 'a\\x0Ab'");
}

// Without the secret nobody can make an object a secret-holding reader accepts: not by sealing
// it with a CRC, another secret or none, and not by moving or editing a genuine one.
TEST(StoredObject, AWriterWithoutTheSecretCannotForge) {
  const std::string secret = "the store's secret";
  const std::vector<uint8_t> payload = Bytes(200, 9);
  for (const std::string forged_with : {"", "a guess", "the store's secret "}) {
    const std::vector<uint8_t> forged = SealStoredObject(kName, payload, forged_with).value();
    EXPECT_EQ(OpenStoredObject(kName, forged, secret).status().code(), StatusCode::kCorrupt) << forged_with;
  }
  // A genuine object of another chunk, with its name field rewritten to this chunk's.
  const std::string other = ChunkObjectName(Key(9), "kvtc", "16");
  std::vector<uint8_t> moved = SealStoredObject(other, payload, secret).value();
  ASSERT_EQ(other.size(), kName.size());
  std::copy(kName.begin(), kName.end(), moved.begin() + 16);
  EXPECT_EQ(OpenStoredObject(kName, moved, secret).status().code(), StatusCode::kCorrupt);
  // Downgraded to a CRC seal with a correct CRC.
  std::vector<uint8_t> downgraded = SealStoredObject(kName, payload, "").value();
  EXPECT_EQ(OpenStoredObject(kName, downgraded, secret).status().code(), StatusCode::kCorrupt);
}

// ---------------------------------------------------------------------------------------------
// Through OpenStore: every backend is bound

std::filesystem::path FreshDir(const std::string& tag) {
  static int n = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvc-bound-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(n++));
  std::filesystem::remove_all(dir);
  return dir;
}

// Two views of one folder: the store as OpenStore gives it, and the bare backend (what anyone
// who can write to the store can do).
struct BoundAndBare {
  std::unique_ptr<Store> bound;
  std::unique_ptr<Store> bare;
};

BoundAndBare OpenBoth(const std::string& tag, const std::string& secret = "") {
  const std::string url = "dir://" + FreshDir(tag).string();
  return {OpenStore(url, {.secret = secret}).value(), OpenBackendStore(url).value()};
}

TEST(BoundStore, AnObjectCopiedToAnotherChunksNameIsCorrupt) {
  auto [store, bare] = OpenBoth("copy");
  const std::string a = ChunkObjectName(Key(1), "quant", "8");
  const std::string other_key = ChunkObjectName(Key(2), "quant", "8");
  const std::string other_level = ChunkObjectName(Key(1), "quant", "4");
  ASSERT_TRUE(store->Put(a, Bytes(500, 1)).ok());
  ASSERT_TRUE(store->Put(other_key, Bytes(500, 2)).ok());
  ASSERT_TRUE(store->Put(other_level, Bytes(300, 3)).ok());
  EXPECT_EQ(store->Get(a).value(), Bytes(500, 1));
  // A writer copies chunk a's object over another prompt's chunk, and over another level of a.
  const std::vector<uint8_t> object = bare->Get(a).value();
  ASSERT_TRUE(bare->Put(other_key, object).ok());
  ASSERT_TRUE(bare->Put(other_level, object).ok());
  for (const std::string& name : {other_key, other_level}) {
    const Result<std::vector<uint8_t>> got = store->Get(name);
    EXPECT_EQ(got.status().code(), StatusCode::kCorrupt) << name;
    EXPECT_EQ(got.status().message(), "stored object holds chunk '" + a + "', read as '" + name + "'");
  }
  // In a batch: kCorrupt in the slot, never kNotFound; the others unaffected.
  const std::vector<std::string> names = {a, other_key, ChunkObjectName(Key(3), "quant", "8"), other_level};
  const auto got = store->GetMany(names);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].value(), Bytes(500, 1));
  EXPECT_EQ(got[1].status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(got[2].status().code(), StatusCode::kNotFound);
  EXPECT_EQ(got[3].status().code(), StatusCode::kCorrupt);
  // A manifest copied to another chunk's manifest name, too.
  const std::vector<uint8_t> manifest = WriteChunkManifest({.chunk_tokens = 4, .chunk_index = 0, .variants = {}});
  ASSERT_TRUE(store->Put(ChunkManifestName(Key(1)), manifest).ok());
  ASSERT_TRUE(bare->Put(ChunkManifestName(Key(2)), bare->Get(ChunkManifestName(Key(1))).value()).ok());
  EXPECT_EQ(store->Get(ChunkManifestName(Key(2))).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(store->Get(ChunkManifestName(Key(1))).value(), manifest);
}

TEST(BoundStore, ObjectsOfAnOlderKvcodecAreCorruptNotDecoded) {
  auto [store, bare] = OpenBoth("legacy");
  const std::string name = ChunkManifestName(Key(1));
  ASSERT_TRUE(bare->Put(name, WriteChunkManifest({.chunk_tokens = 4, .chunk_index = 0, .variants = {}})).ok());
  const Status s = store->Get(name).status();
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Contains(s, "older kvcodec")) << s.ToString();
  // Exists, Delete and Stats see the backend as it is.
  EXPECT_TRUE(store->Exists(name).value());
  EXPECT_EQ(store->Stats().value().objects, 1u);
  ASSERT_TRUE(store->Delete(name).ok());
  EXPECT_EQ(store->Get(name).status().code(), StatusCode::kNotFound);
}

TEST(BoundStore, WithASecretOnlyObjectsOfThatSecretAreRead) {
  const std::string dir = FreshDir("secret").string();
  const std::string url = "dir://" + dir;
  auto writer = OpenStore(url, {.secret = "s1"}).value();
  auto same = OpenStore(url, {.secret = "s1"}).value();
  auto other_secret = OpenStore(url, {.secret = "s2"}).value();
  auto no_secret = OpenStore(url).value();
  const std::string name = ChunkObjectName(Key(1), "kvtc", "16");
  ASSERT_TRUE(writer->Put(name, Bytes(1000, 1)).ok());
  EXPECT_EQ(same->Get(name).value(), Bytes(1000, 1));
  EXPECT_EQ(other_secret->Get(name).status().code(), StatusCode::kCorrupt);
  EXPECT_TRUE(Contains(other_secret->Get(name).status(), "not authenticated by this store's secret"));
  EXPECT_EQ(no_secret->Get(name).status().code(), StatusCode::kCorrupt);
  // A writer without the secret (or with another) cannot put anything the secret's holders read.
  const std::string forged = ChunkObjectName(Key(2), "kvtc", "16");
  for (Store* w : {no_secret.get(), other_secret.get()}) {
    ASSERT_TRUE(w->Put(forged, Bytes(1000, 2)).ok());
    EXPECT_EQ(same->Get(forged).status().code(), StatusCode::kCorrupt);
  }
  // Tampering with any byte of a stored object.
  auto bare = OpenBackendStore(url).value();
  const std::vector<uint8_t> good = bare->Get(name).value();
  for (size_t i = 0; i < good.size(); i += (i < 64 || i + 64 > good.size()) ? 1 : 97) {
    std::vector<uint8_t> bad = good;
    bad[i] ^= 0x10;
    ASSERT_TRUE(bare->Put(name, bad).ok());
    EXPECT_EQ(same->Get(name).status().code(), StatusCode::kCorrupt) << "byte " << i;
  }
  ASSERT_TRUE(bare->Put(name, good).ok());
  EXPECT_EQ(same->Get(name).value(), Bytes(1000, 1));
}

TEST(BoundStore, BackendErrorsPassThrough) {
  auto store = OpenStore("mem://").value();
  EXPECT_EQ(store->Put("bad/name", Bytes(3, 1)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("bad/name").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("absent").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->url(), "mem://");
  auto bounded = OpenStore("mem://", {.capacity_bytes = 100}).value();
  EXPECT_EQ(bounded->Put("big", Bytes(100, 1)).code(), StatusCode::kInvalidArgument)
      << "the envelope counts against the bound";
}

}  // namespace
}  // namespace kvc

// ---------------------------------------------------------------------------------------------
// Seeds for the stored_object fuzz target (stored_object_fuzz.cc reads them under kFuzzName,
// with and without kFuzzSecret).

namespace kvc {
namespace {

TEST(StoredObjectFuzzCorpus, DISABLED_Regenerate) {
  const auto dir = std::filesystem::path(KVCODEC_SOURCE_DIR) / "fuzz" / "corpus" / "stored_object";
  std::filesystem::create_directories(dir);
  auto write = [&](const char* file, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir / file, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  };
  const std::string name = "00112233445566778899aabbccddeeff.kvtc.16";
  const std::string secret = "kvcodec-fuzz-secret";
  write("crc32c", SealStoredObject(name, Bytes(48, 1), "").value());
  write("hmac_sha256", SealStoredObject(name, Bytes(48, 2), secret).value());
  write("empty_payload", SealStoredObject(name, {}, "").value());
  write("other_name", SealStoredObject("00112233445566778899aabbccddeeff.manifest", Bytes(16, 3), "").value());
}

}  // namespace
}  // namespace kvc
