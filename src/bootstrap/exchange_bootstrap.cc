// exchangeBootstrap: each round is one call of the caller's exchange function, checked.
#include "bootstrap/exchange_bootstrap.hpp"

#include <string>
#include <vector>

namespace sharc::bootstrap {
namespace {

[[noreturn]] void fail(Result code, int rank, const std::string& call, const std::string& what) {
  throw Error(code, "rank " + std::to_string(rank) + ": " + call + ": " + what);
}

class ExchangeBootstrap final : public bootstrap::Bootstrap {
 public:
  ExchangeBootstrap(int rank, int size, ExchangeFn fn)
      : rank_(rank), size_(size), fn_(std::move(fn)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::string> allGather(const std::string& blob) override {
    ++round_;
    if (blob.size() > kMaxBlobBytes)
      fail(Result::InvalidArgument, rank_, "exchange round " + std::to_string(round_),
           "blob of " + std::to_string(blob.size()) + " bytes exceeds " +
               std::to_string(kMaxBlobBytes));
    std::vector<std::string> all = fn_(blob);
    if (all.size() != static_cast<size_t>(size_))
      fail(Result::InvalidUsage, rank_, "exchange round " + std::to_string(round_),
           "the exchange returned " + std::to_string(all.size()) +
               " blobs (expected one per "
               "rank: " +
               std::to_string(size_) + ")");
    if (all[static_cast<size_t>(rank_)] != blob)
      fail(Result::InvalidUsage, rank_, "exchange round " + std::to_string(round_),
           "the exchange returned another blob at this rank's index (are the ranks given to "
           "the exchange and to sharc the same?)");
    return all;
  }

 private:
  int rank_, size_, round_ = 0;
  ExchangeFn fn_;
};

}  // namespace

std::unique_ptr<Bootstrap> exchangeBootstrap(int rank, int size, ExchangeFn exchange) {
  return std::make_unique<ExchangeBootstrap>(rank, size, std::move(exchange));
}

}  // namespace sharc::bootstrap
