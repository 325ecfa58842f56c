// Encoding of the bootstrap messages: each field in order, strings as a 4-byte length and
// their bytes, integers as fixed-size little-endian words (the host's order: one build, one
// architecture per job).
#include "runtime/bootstrap_messages.hpp"

#include <cstring>
#include <sharc/error.hpp>

namespace sharc::detail {
namespace {

class Writer {
 public:
  Writer& text(const std::string& s) {
    word(static_cast<uint32_t>(s.size()));
    out_ += s;
    return *this;
  }
  template <typename T>
  Writer& word(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  std::string done() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fields in order; any shortfall or leftover throws, naming the round and the sender.
class Reader {
 public:
  Reader(const std::string& bytes, const char* round, int rank, int from)
      : bytes_(bytes), round_(round), rank_(rank), from_(from) {}
  std::string text() {
    const auto n = word<uint32_t>();
    need(n, "a string");
    std::string s = bytes_.substr(at_, n);
    at_ += n;
    return s;
  }
  template <typename T>
  T word() {
    need(sizeof(T), "an integer");
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  void end() const {
    if (at_ != bytes_.size())
      fail(std::to_string(bytes_.size() - at_) + " bytes more than expected");
  }

 private:
  void need(size_t n, const char* what) const {
    if (bytes_.size() - at_ < n)
      fail("too short for " + std::string(what) + " at byte " + std::to_string(at_) +
           " (expected " + std::to_string(n) + " more bytes, " +
           std::to_string(bytes_.size() - at_) + " left)");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(Result::InternalError, "rank " + std::to_string(rank_) + ": init: " + round_ +
                                           " message from rank " + std::to_string(from_) +
                                           " is malformed: " + why +
                                           " (do all ranks run the same sharc build?)");
  }
  const std::string& bytes_;
  const char* round_;
  int rank_, from_;
  size_t at_ = 0;
};

}  // namespace

std::string HelloMessage::encode() const {
  return Writer().text(node).word(pid).word(cmaProbe).text(machine).done();
}

HelloMessage HelloMessage::decode(const std::string& bytes, int rank, int from) {
  Reader in(bytes, "hello", rank, from);
  HelloMessage m;
  m.node = in.text();
  m.pid = in.word<int32_t>();
  m.cmaProbe = in.word<uint64_t>();
  m.machine = in.text();
  in.end();
  return m;
}

std::string AddressMessage::encode() const {
  return Writer().text(provider).text(segment).text(address).done();
}

AddressMessage AddressMessage::decode(const std::string& bytes, int rank, int from) {
  Reader in(bytes, "address", rank, from);
  AddressMessage m;
  m.provider = in.text();
  m.segment = in.text();
  m.address = in.text();
  in.end();
  return m;
}

std::string ReadinessMessage::encode() const {
  return Writer()
      .word(static_cast<uint8_t>(canReadNext))
      .word(static_cast<uint8_t>(shmMapped))
      .done();
}

ReadinessMessage ReadinessMessage::decode(const std::string& bytes, int rank, int from) {
  Reader in(bytes, "readiness", rank, from);
  ReadinessMessage m;
  m.canReadNext = in.word<uint8_t>() != 0;
  m.shmMapped = in.word<uint8_t>() != 0;
  in.end();
  return m;
}

}  // namespace sharc::detail
