// The one JSON writer and reader of the `attn` command (explain, run, check and
// bench all emit through it). Numbers are exact: integers as integers, doubles
// in the shortest form that reads back to the same double.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attn::cli::json {

// Serialized values.
std::string str(const std::string& s);  // a string literal; UTF-8 passes through
std::string num(double x);              // shortest round-trip; NaN and inf become null
std::string integer(int64_t x);
// A count held in a double (FLOPs): its exact integer digits when integral, else num().
std::string count(double x);
std::string boolean(bool b);
std::string array(const std::vector<std::string>& items);  // of serialized values

// An object whose fields keep their insertion order.
class Object {
 public:
  Object& raw(const std::string& key, std::string serialized);
  Object& str(const std::string& key, const std::string& s) { return raw(key, json::str(s)); }
  Object& num(const std::string& key, double x) { return raw(key, json::num(x)); }
  Object& integer(const std::string& key, int64_t x) { return raw(key, json::integer(x)); }
  Object& count(const std::string& key, double x) { return raw(key, json::count(x)); }
  Object& boolean(const std::string& key, bool b) { return raw(key, json::boolean(b)); }
  Object& object(const std::string& key, const Object& o) { return raw(key, o.dump()); }
  // One line: {"a": 1, "b": [...]}.
  std::string dump() const;
  // One top-level field per line; arrays of objects one element per line.
  std::string pretty() const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// A parsed value (for bench --resume and the tests).
struct Value {
  enum class Type { null, boolean, number, string, array, object } type = Type::null;
  bool b = false;
  double number = 0.0;
  std::string text;  // a string's value, or a number's digits as written
  std::vector<Value> items;
  std::vector<std::pair<std::string, Value>> fields;
  const Value* get(const std::string& key) const;  // nullptr when absent or not an object
};

// Serializes a parsed value again (numbers keep their digits as written).
std::string dump(const Value& v);

// The whole text must be one JSON value (whitespace around it allowed); throws
// attn::Error naming the offset of the first syntax error.
Value parse(const std::string& text);

}  // namespace attn::cli::json
