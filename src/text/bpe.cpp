#include "meshtrain/text/bpe.h"

#include <algorithm>
#include <queue>

#include "meshtrain/core/error.h"
#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

Bpe::Bpe(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         bool ignore_merges, std::optional<int64_t> unk, bool byte_fallback, bool fuse_unk)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), unk_(unk), byte_fallback_(byte_fallback), fuse_unk_(fuse_unk) {
  for (int b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    auto it = vocab_.find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    MT_USER_CHECK(ia != vocab_.end() && ib != vocab_.end() && ic != vocab_.end(), "tokenizer.json: merge ", r, " ('",
                  a, "' '", b, "') names a token that is not in model.vocab");
    // A pair listed twice keeps its first (lowest) rank, as `tokenizers` does.
    merges_.try_emplace(key(ia->second, ib->second), Merge{static_cast<uint32_t>(r), ic->second});
  }
}

const Bpe::Merge* Bpe::find_merge(int64_t a, int64_t b) const {
  auto it = merges_.find(key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

std::vector<int64_t> Bpe::initial_symbols(std::string_view word) const {
  std::vector<int64_t> ids;
  bool unk_pending = false;  // an unknown token not added yet (fuse_unk extends it)
  for (const CodePoint& c : decode_utf8(word)) {
    const std::string_view ch = word.substr(c.offset, c.size);
    if (auto it = vocab_.find(std::string(ch)); it != vocab_.end()) {
      if (unk_pending) ids.push_back(*unk_);
      unk_pending = false;
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char b) { return byte_ids_[static_cast<unsigned char>(b)] >= 0; })) {
      // As `tokenizers` does, the bytes go in before an unknown token still pending.
      for (char b : ch) ids.push_back(byte_ids_[static_cast<unsigned char>(b)]);
      continue;
    }
    if (!unk_) continue;  // no unknown token: the character is dropped
    if (unk_pending && !fuse_unk_) ids.push_back(*unk_);
    unk_pending = true;
  }
  if (unk_pending) ids.push_back(*unk_);
  return ids;
}

void Bpe::encode(std::string_view word, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(std::string(word)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The word's symbols as a linked list over a vector; a merged-away symbol gets id -1.
  struct Symbol {
    int64_t id;
    int prev, next;
  };
  std::vector<Symbol> sym;
  for (int64_t id : initial_symbols(word)) sym.push_back({id, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1});
  if (sym.empty()) return;
  sym.back().next = -1;
  // Candidate merges (rank, position): lowest rank first, leftmost first among equals; an entry is stale when
  // its pair no longer stands at that position (checked on pop, as `tokenizers` does).
  struct Cand {
    uint32_t rank;
    int pos;
    int64_t result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> queue;
  auto push = [&](int pos) {
    if (pos < 0 || sym[static_cast<size_t>(pos)].next < 0) return;
    if (auto* m = find_merge(sym[static_cast<size_t>(pos)].id, sym[static_cast<size_t>(sym[static_cast<size_t>(pos)].next)].id))
      queue.push({m->rank, pos, m->result});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Symbol& left = sym[static_cast<size_t>(c.pos)];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(left.next)];
    const Merge* m = find_merge(left.id, right.id);
    if (!m || m->result != c.result) continue;
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) sym[static_cast<size_t>(left.next)].prev = c.pos;
    push(left.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace meshtrain::text
