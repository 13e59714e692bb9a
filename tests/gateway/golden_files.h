// Reading the golden files that tools/golden/make_chat_template_golden.py wrote with Python's
// jinja2 (tests/gateway/golden/).
#pragma once

#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace hearth::gateway::testing {

inline std::string golden_dir() {
  return std::string(HEARTH_SOURCE_DIR) + "/tests/gateway/golden";
}

inline nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

// "2025-03-07T14:05:09" as the broken-down time Python's datetime.strftime formats.
inline std::tm parse_now(const std::string& iso) {
  std::tm tm{};
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    throw std::runtime_error("bad timestamp " + iso);
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t t = timegm(&tm);  // fills in the weekday and day of the year
  gmtime_r(&t, &tm);
  return tm;
}

}  // namespace hearth::gateway::testing
