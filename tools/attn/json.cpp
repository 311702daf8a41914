// JSON writing and reading for the `attn` command (see json.h).
#include "json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "attn/error.h"

namespace attn::cli::json {

std::string str(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string num(double x) {
  if (!std::isfinite(x)) return "null";  // JSON has no NaN or infinity
  char buf[32];
  // Shortest text that parses back to exactly x (33554432, 0.1, 1e+300).
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string integer(int64_t x) { return std::to_string(x); }

std::string count(double x) {
  // Integral doubles below 2^63 convert exactly; 33554432, not 3.35544e+07.
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9.2e18) return std::to_string(static_cast<int64_t>(x));
  return num(x);
}

std::string boolean(bool b) { return b ? "true" : "false"; }

std::string array(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + "]";
}

Object& Object::raw(const std::string& key, std::string serialized) {
  fields_.emplace_back(key, std::move(serialized));
  return *this;
}

std::string Object::dump() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i) s += (i ? ", " : "") + json::str(fields_[i].first) + ": " + fields_[i].second;
  return s + "}";
}

namespace {

// "[{...}, {...}]" (as array() writes it) with one element per line.
std::string split_objects(const std::string& arr, const std::string& indent) {
  if (arr.size() < 3 || arr[1] != '{') return arr;
  std::string s = "[\n" + indent + "  ";
  int depth = 0;
  bool in_string = false;
  for (size_t i = 1; i + 1 < arr.size(); ++i) {
    const char c = arr[i];
    if (in_string) {
      s += c;
      if (c == '\\') s += arr[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (depth == 0 && c == ',') {
      s += ",\n" + indent + "  ";
      ++i;  // the space after the comma
      continue;
    }
    s += c;
  }
  return s + "\n" + indent + "]";
}

}  // namespace

std::string Object::pretty() const {
  std::string s = "{";
  for (size_t i = 0; i < fields_.size(); ++i)
    s += std::string(i ? "," : "") + "\n  " + json::str(fields_[i].first) + ": " + split_objects(fields_[i].second, "  ");
  return s + "\n}\n";
}

const Value* Value::get(const std::string& key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}

  Value document() {
    Value v = value();
    space();
    if (i_ != t_.size()) error("text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    fail(ErrorKind::value, "not valid JSON: " + what, "offset " + std::to_string(i_) + " of " + std::to_string(t_.size()),
         "one JSON value (RFC 8259)", "rewrite or remove the file");
  }
  void space() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t')) ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) error(std::string("expected '") + c + "'");
  }
  bool word(const char* w) {
    const std::string s(w);
    if (t_.compare(i_, s.size(), s) != 0) return false;
    i_ += s.size();
    return true;
  }

  Value value() {
    if (++depth_ > 256) error("nested too deeply");
    space();
    if (i_ >= t_.size()) error("unexpected end");
    Value v;
    const char c = t_[i_];
    if (c == '{') {
      v.type = Value::Type::object;
      ++i_;
      if (!eat('}')) {
        do {
          space();
          if (i_ >= t_.size() || t_[i_] != '"') error("expected a string key");
          std::string key = string();
          expect(':');
          v.fields.emplace_back(std::move(key), value());
        } while (eat(','));
        expect('}');
      }
    } else if (c == '[') {
      v.type = Value::Type::array;
      ++i_;
      if (!eat(']')) {
        do v.items.push_back(value());
        while (eat(','));
        expect(']');
      }
    } else if (c == '"') {
      v.type = Value::Type::string;
      v.text = string();
    } else if (word("true") || word("false")) {
      v.type = Value::Type::boolean;
      v.b = t_[i_ - 1] == 'e' && t_[i_ - 2] == 'u';
    } else if (word("null")) {
      v.type = Value::Type::null;
    } else {
      v.type = Value::Type::number;
      v.text = number();
      v.number = std::strtod(v.text.c_str(), nullptr);
    }
    --depth_;
    return v;
  }

  std::string number() {
    const size_t start = i_;
    auto digits = [&] {
      const size_t from = i_;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
      return i_ > from;
    };
    if (i_ < t_.size() && t_[i_] == '-') ++i_;
    if (i_ < t_.size() && t_[i_] == '0') ++i_;
    else if (!digits()) error("expected a value");
    if (i_ < t_.size() && t_[i_] == '.') {
      ++i_;
      if (!digits()) error("expected digits after '.'");
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      if (!digits()) error("expected an exponent");
    }
    return t_.substr(start, i_ - start);
  }

  std::string string() {
    ++i_;  // the opening quote
    std::string s;
    while (true) {
      if (i_ >= t_.size()) error("unterminated string");
      const unsigned char c = static_cast<unsigned char>(t_[i_++]);
      if (c == '"') return s;
      if (c < 0x20) error("control character in a string");
      if (c != '\\') {
        s += static_cast<char>(c);
        continue;
      }
      if (i_ >= t_.size()) error("unterminated string");
      const char e = t_[i_++];
      switch (e) {
        case '"': case '\\': case '/': s += e; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          if (i_ + 4 > t_.size()) error("short \\u escape");
          const std::string hex = t_.substr(i_, 4);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) error("bad \\u escape");
          i_ += 4;
          const unsigned long u = std::strtoul(hex.c_str(), nullptr, 16);
          if (u < 0x80) s += static_cast<char>(u);
          else s += '?';  // attn writes only control characters this way
          break;
        }
        default: error("bad escape");
      }
    }
  }

  const std::string& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Value parse(const std::string& text) { return Parser(text).document(); }

std::string dump(const Value& v) {
  switch (v.type) {
    case Value::Type::null: return "null";
    case Value::Type::boolean: return boolean(v.b);
    case Value::Type::number: return v.text;
    case Value::Type::string: return str(v.text);
    case Value::Type::array: {
      std::vector<std::string> items;
      for (const Value& x : v.items) items.push_back(dump(x));
      return array(items);
    }
    case Value::Type::object: {
      Object o;
      for (const auto& [k, x] : v.fields) o.raw(k, dump(x));
      return o.dump();
    }
  }
  return "null";
}

}  // namespace attn::cli::json
