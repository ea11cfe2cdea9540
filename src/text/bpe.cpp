#include "meshtrain/text/bpe.h"

#include <queue>

#include "meshtrain/core/error.h"
#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

Bpe::Bpe(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
         bool ignore_merges, std::optional<int64_t> unk)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges), unk_(unk) {
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
  for (const CodePoint& c : decode_utf8(word)) {
    auto it = vocab_.find(std::string(word.substr(c.offset, c.size)));
    if (it == vocab_.end() && !unk_) continue;  // no unknown token: the character is dropped
    sym.push_back({it == vocab_.end() ? *unk_ : it->second, static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1});
  }
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
