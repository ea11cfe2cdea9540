// Closed enumerations with their spellings: each is declared once, as an X-macro of (identifier, spelling)
// pairs, and MT_DEFINE_ENUM generates the `enum class` and its name table from it, so a new value is one line.
//
//   #define MT_FAMILY_VALUES(V) V(gpt2, "gpt2") V(llama, "llama")
//   MT_DEFINE_ENUM(Family, MT_FAMILY_VALUES)              // enum class Family { gpt2, llama };
//   enum_name(Family::llama)                              // "llama"
//   enum_from<Family>("llama")                            // std::optional<Family>
//   parse_enum<Family>("lama", "--family")                // UserError "--family: given 'lama'; valid gpt2 |
//                                                         //   llama (did you mean 'llama'?)"
//
// Spellings may hold any characters an identifier cannot ("interleaved-1f1b", "auto"). The config's
// enumerations live in core/config_enums.h; the config schema (core/config_schema.h) takes an enum field's
// valid spellings from here.
#pragma once

#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace meshtrain {

// Specialised by MT_DEFINE_ENUM: `names` in declaration order (index = the enumerator's value) and `note`, a
// hint said after the valid list when a value is refused (empty for most).
template <typename E>
struct EnumSpellings;

template <typename E>
concept SpelledEnum = std::is_enum_v<E> && requires { EnumSpellings<E>::names; };

template <SpelledEnum E>
constexpr std::span<const std::string_view> enum_spellings() {
  return EnumSpellings<E>::names;
}

template <SpelledEnum E>
constexpr std::string_view enum_name(E e) {
  return EnumSpellings<E>::names[static_cast<std::size_t>(e)];
}

// The spelling as a C string (printf); the spellings are string literals, so it is NUL-terminated.
template <SpelledEnum E>
constexpr const char* enum_c_str(E e) {
  return enum_name(e).data();
}

// Streams the spelling, so cat("given ", cfg.model.family) reads as the config is written.
template <SpelledEnum E>
std::ostream& operator<<(std::ostream& os, E e) {
  return os << enum_name(e);
}

// Index of `text` among `spellings` (exact match), or -1.
int find_spelling(std::span<const std::string_view> spellings, std::string_view text);
// "auto | nccl | cpu".
std::string join_spellings(std::span<const std::string_view> spellings);
// "given 'x'; valid a | b (did you mean 'a'?)", or with the note where no spelling is near: the tail of every
// message refusing a value of an enumeration.
std::string refused_spelling(std::string_view given, std::span<const std::string_view> spellings,
                             std::string_view note = {});

template <SpelledEnum E>
std::optional<E> enum_from(std::string_view text) {
  const int i = find_spelling(enum_spellings<E>(), text);
  if (i < 0) return std::nullopt;
  return static_cast<E>(i);
}

[[noreturn]] void throw_refused_spelling(std::string_view where, std::string_view given,
                                         std::span<const std::string_view> spellings, std::string_view note);

// `text` as an E, or a UserError "WHERE: given 'x'; valid a | b" naming the flag or key it came from.
template <SpelledEnum E>
E parse_enum(std::string_view text, std::string_view where) {
  if (auto e = enum_from<E>(text)) return *e;
  throw_refused_spelling(where, text, enum_spellings<E>(), EnumSpellings<E>::note);
}

}  // namespace meshtrain

#define MT_ENUM_IDENTIFIER(id, spelling) id,
#define MT_ENUM_SPELLING(id, spelling) spelling,

// enum class Name { ids… } and its spellings, from VALUES(V), an X-macro of V(identifier, "spelling") rows.
// Used at namespace meshtrain scope. MT_DEFINE_ENUM_NOTED adds the note said when a value is refused.
#define MT_DEFINE_ENUM_NOTED(Name, VALUES, NOTE)                                      \
  enum class Name { VALUES(MT_ENUM_IDENTIFIER) };                                     \
  template <>                                                                         \
  struct EnumSpellings<Name> {                                                        \
    static constexpr std::string_view names[] = {VALUES(MT_ENUM_SPELLING)};           \
    static constexpr std::string_view note = NOTE;                                    \
  };
#define MT_DEFINE_ENUM(Name, VALUES) MT_DEFINE_ENUM_NOTED(Name, VALUES, "")
